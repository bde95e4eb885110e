//! Assembles a streamed Messages API response from its server-sent events.

//! Retry policy: exponential backoff with jitter that honours `retry-after`.

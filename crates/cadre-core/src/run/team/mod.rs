//! Teams: named agents that stay after they answer, message each other and share a task
//! list — with every change journaled before it takes effect, so a resumed run loses no
//! message and delivers none twice.
//!
//! A `Task` call with a `name` starts a member. When a member ends its turn it waits
//! ([`Seat::idle`]) for a message, which wakes it with its history intact; a message to a
//! busy member waits for its next tool results ([`Seat::arrived`]). Either way a message
//! reaches the recipient between turns, never inside one, as a journaled
//! [`Step::Delivered`](crate::vocab::step::Step::Delivered) that the agent's state folds into its history. The primary agent is
//! a member too: when it has answered it waits until nothing is left in flight, and then the
//! run ends and the members still waiting are closed.

pub(crate) mod error;
mod members;
mod rules;
mod seat;
mod state;
pub(crate) mod tools;

pub use members::{Team, TeamLimits};
pub use seat::Seat;
pub use state::TeamState;

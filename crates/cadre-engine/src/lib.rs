//! cadre on Restate: a fleet of workers that run a run's agents as durable invocations.
//!
//! A worker ([`serve`]) serves two Restate services. `CadreAgent/run` runs one
//! agent per invocation: each model request and each tool result is a journaled step (the
//! core's [`Journal`](cadre_core::internal::Journal) seam, run by the invocation's
//! driver), and each `Task` call is a call to `CadreAgent/run` again, taken by whichever
//! worker Restate and the load balancer pick. The `CadreRun` object, one per run, holds
//! what the tree shares: its model slots, its token budget, its roster. [`client`] submits a
//! run through Restate's ingress, follows it and cancels it.

mod driver;
mod endpoint;
mod error;
mod git_tree;
mod pump;
mod service;

pub mod client;
pub mod identity;
pub mod wire;
pub mod worker;
pub mod workspace;

mod unhonoured;
pub use unhonoured::unhonoured;

pub use endpoint::serve;
pub use worker::{Worker, WorkerError};
pub use workspace::{CloneCache, WorkspaceError, WriterTree};

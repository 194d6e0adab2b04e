//! HTTP retries that are safe by construction.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod classify;
mod evidence;
mod replay;

pub mod backoff;
pub mod budget;
#[cfg(feature = "durable")]
pub mod durable;
pub mod retry_after;

pub use classify::{Classify, Failure, PermanentCategory, Pushback};
pub use evidence::Evidence;
pub use replay::Replayability;

//! Integration tests live in `tests/`; shared helpers (fault-injecting servers) live here.

pub mod adapter_error;
pub use adapter_error::AdapterError;

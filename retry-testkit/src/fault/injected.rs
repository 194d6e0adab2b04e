//! The error a reset or a refusal the fault layer injects fails with.

use std::fmt;
use std::io;

use super::plan::Fault;

/// The error of an injected [`Fault::Reset`] or [`Fault::Refuse`]. Its source is the I/O error
/// a real one would carry (`ConnectionReset`, `ConnectionRefused`), which is what error
/// classifiers look for.
#[derive(Debug)]
pub struct InjectedFault {
    fault: Fault,
    source: io::Error,
}

impl InjectedFault {
    pub(super) fn new(fault: Fault) -> Self {
        let kind = match fault {
            Fault::Refuse => io::ErrorKind::ConnectionRefused,
            _ => io::ErrorKind::ConnectionReset,
        };
        InjectedFault {
            fault,
            source: io::Error::new(kind, "injected by retry-testkit's fault layer"),
        }
    }

    /// The fault injected.
    pub fn fault(&self) -> Fault {
        self.fault
    }
}

impl fmt::Display for InjectedFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.fault {
            Fault::Refuse => f.write_str("injected fault: refused before processing"),
            _ => f.write_str("injected fault: connection reset"),
        }
    }
}

impl std::error::Error for InjectedFault {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

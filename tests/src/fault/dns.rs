//! A scripted DNS resolver for reqwest: DNS failures and connect timeouts without the network.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use super::Script;

/// What one lookup answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
    /// Resolves to this address (use a URL without an explicit port so its port is kept).
    Addr(SocketAddr),
    /// Fails: a DNS error.
    Fail,
    /// Never answers: with a connect timeout this is a connect timeout, on loopback only.
    Hang,
}

/// A resolver answering successive lookups from a script, then `default` forever.
#[derive(Debug)]
pub struct FakeDns {
    script: Script<Resolution>,
    lookups: AtomicUsize,
}

impl FakeDns {
    /// A resolver answering `script`, then `default`.
    pub fn new(script: impl IntoIterator<Item = Resolution>, default: Resolution) -> Arc<FakeDns> {
        Arc::new(FakeDns {
            script: Script::new(script, default),
            lookups: AtomicUsize::new(0),
        })
    }

    /// Lookups made.
    pub fn lookups(&self) -> usize {
        self.lookups.load(Ordering::SeqCst)
    }
}

impl Resolve for FakeDns {
    fn resolve(&self, _name: Name) -> Resolving {
        self.lookups.fetch_add(1, Ordering::SeqCst);
        let answer = self.script.next();
        Box::pin(async move {
            match answer {
                Resolution::Addr(addr) => Ok(Box::new(std::iter::once(addr)) as Addrs),
                Resolution::Fail => Err("fake dns: no such host".into()),
                Resolution::Hang => std::future::pending().await,
            }
        })
    }
}

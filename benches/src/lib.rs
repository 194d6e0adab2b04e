//! Shared pieces of the benchmarks: the attempt bodies and the contenders (in process and over
//! loopback HTTP), a counting allocator, instruction counts under callgrind, measuring in
//! several processes, an error type the runtime can classify, registries, a tiny loopback HTTP
//! server and the AWS jitter simulation.
//!
//! Everything here is for measurement only; the crate is never published and its peer
//! dependencies (backon, tower, tokio-retry, reqwest-middleware, reqwest-retry) stay out of
//! `retry-runtime`'s dependency tree.

pub mod alloc;
pub mod body;
pub mod callgrind;
pub mod contention;
pub mod inproc;
pub mod loopback;
pub mod processes;
pub mod server;
pub mod sim;

use std::fmt;
use std::time::Duration;

use retry_runtime::{Classify, Evidence, Registry, UpstreamConfig};

/// The attempt error of every benchmark: a status, a transport failure or the runtime's own.
#[derive(Debug)]
pub enum BenchError {
    /// A response with this status arrived.
    Status(u16),
    /// The transport failed.
    Transport(reqwest::Error),
    /// The retry runtime refused or stopped the call.
    Runtime(retry_runtime::Error),
    /// A peer's attempt timeout (`tokio::time::timeout`) cut the attempt.
    TimedOut,
}

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BenchError::Status(s) => write!(f, "status {s}"),
            BenchError::Transport(e) => write!(f, "transport: {e}"),
            BenchError::Runtime(e) => write!(f, "runtime: {e}"),
            BenchError::TimedOut => f.write_str("attempt timed out"),
        }
    }
}

impl std::error::Error for BenchError {}

impl From<retry_runtime::Error> for BenchError {
    fn from(e: retry_runtime::Error) -> Self {
        BenchError::Runtime(e)
    }
}

impl From<reqwest::Error> for BenchError {
    fn from(e: reqwest::Error) -> Self {
        BenchError::Transport(e)
    }
}

impl Classify for BenchError {
    fn evidence(&self) -> Evidence {
        match self {
            BenchError::Status(_) => Evidence::ResponseReceived,
            BenchError::Transport(e) if e.is_connect() => Evidence::NotSent,
            BenchError::Transport(_) | BenchError::TimedOut => Evidence::SentNoResponse,
            BenchError::Runtime(e) => e.evidence(),
        }
    }
    fn status(&self) -> Option<u16> {
        match self {
            BenchError::Status(s) => Some(*s),
            _ => None,
        }
    }
    fn permanent(&self) -> Option<retry_runtime::PermanentCategory> {
        match self {
            BenchError::Runtime(e) => e.permanent(),
            _ => None,
        }
    }
}

/// One GET whose body is read in full; a non-2xx status is an error, its body dropped unread,
/// as the library's send path (`send_attempt`), reqwest's `error_for_status` and
/// reqwest-retry do: every contender of the failure path then does the same work per 503.
pub async fn get(client: &reqwest::Client, url: &str) -> Result<bytes::Bytes, BenchError> {
    let response = client.get(url).send().await?;
    let status = response.status();
    if !status.is_success() {
        return Err(BenchError::Status(status.as_u16()));
    }
    Ok(response.bytes().await?)
}

/// A registry with `names`, each configured with `config`, seeded for reproducible jitter.
pub fn registry(names: &[&str], config: UpstreamConfig) -> Registry {
    names
        .iter()
        .fold(Registry::builder().seed(7), |b, name| {
            b.upstream(*name, config.clone())
        })
        .build()
        .expect("valid benchmark registry")
}

/// The upstream configuration of the outage benchmarks: defaults with millisecond backoff, so
/// counts come out in milliseconds of wall time.
pub fn fast_config() -> UpstreamConfig {
    UpstreamConfig::new().with_backoff(
        retry_runtime::backoff::Backoff::new()
            .with_initial(Duration::from_millis(1))
            .with_max_backoff(Duration::from_millis(4)),
    )
}

//! What the upstream received: every request, in arrival order.

use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// One request as the scripted upstream received it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Request {
    /// The method (`POST`).
    pub method: String,
    /// The request target (`/orders/7/register?x=1`).
    pub path: String,
    /// The headers in the order received, names in lower case.
    pub headers: Vec<(String, String)>,
    /// The body, as far as it was read (whole for a processed request).
    pub body: Vec<u8>,
    /// When it arrived, from the upstream's start.
    pub at: Duration,
    /// Whether the upstream read it whole before acting (see [`Step`](crate::Step)): a real
    /// server could have executed it.
    pub processed: bool,
    /// The connection it came on (0-based, in accept order).
    pub connection: usize,
}

impl Request {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The `Idempotency-Key` header.
    pub fn key(&self) -> Option<&str> {
        self.header(retry_runtime::http::headers::IDEMPOTENCY_KEY)
    }

    /// Whether the method is a write (not `GET`, `HEAD`, `OPTIONS` or `TRACE`).
    pub fn is_write(&self) -> bool {
        !matches!(self.method.as_str(), "GET" | "HEAD" | "OPTIONS" | "TRACE")
    }

    /// The body as text (lossy).
    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

impl fmt::Display for Request {
    /// `+12.3ms POST /pay key=abc processed` (one line).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "+{:.1}ms {} {}",
            self.at.as_secs_f64() * 1e3,
            self.method,
            self.path
        )?;
        match self.key() {
            Some(key) => write!(f, " key={key}")?,
            None => f.write_str(" no key")?,
        }
        f.write_str(match self.processed {
            true => " processed",
            false => " not processed",
        })
    }
}

/// The upstream's log: connections accepted and requests received.
#[derive(Debug)]
pub(crate) struct Log {
    started: Instant,
    connections: AtomicUsize,
    requests: Mutex<Vec<Request>>,
    /// Wakes [`Log::received`] as each request is recorded.
    arrived: tokio::sync::Notify,
}

impl Log {
    pub(crate) fn new() -> Self {
        Log {
            started: Instant::now(),
            connections: AtomicUsize::new(0),
            requests: Mutex::new(Vec::new()),
            arrived: tokio::sync::Notify::new(),
        }
    }

    /// Counts an accepted connection; its number.
    pub(crate) fn connection(&self) -> usize {
        self.connections.fetch_add(1, Ordering::SeqCst)
    }

    pub(crate) fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    pub(crate) fn since_start(&self) -> Duration {
        self.started.elapsed()
    }

    pub(crate) fn push(&self, request: Request) {
        self.lock().push(request);
        self.arrived.notify_waiters();
    }

    /// Completes once `n` requests are recorded.
    pub(crate) async fn received(&self, n: usize) {
        loop {
            // Made before the check: a `Notified` sees every `notify_waiters` from its creation
            // on, so a request recorded between the two still wakes it.
            let arrived = self.arrived.notified();
            if self.lock().len() >= n {
                return;
            }
            arrived.await;
        }
    }

    pub(crate) fn requests(&self) -> Vec<Request> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Request>> {
        self.requests.lock().unwrap_or_else(|e| e.into_inner())
    }
}

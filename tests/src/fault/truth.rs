//! What the server really saw: the ground truth a classification is checked against.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// One request as the server saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeenRequest {
    /// The request method (HTTP/1 only; empty for HTTP/2, whose headers are HPACK-encoded).
    pub method: String,
    /// The request target (HTTP/1 only).
    pub path: String,
    /// The idempotency key header (`Idempotency-Key` or the name the server was told).
    pub key: Option<String>,
    /// The `retry-attempt` header.
    pub attempt: Option<String>,
    /// The `retry-deadline-ms` header.
    pub deadline_ms: Option<String>,
    /// The HTTP/2 stream id (0 for HTTP/1).
    pub stream: u32,
    /// Whether the server processed (executed) it. A request refused before processing
    /// (REFUSED_STREAM, above a GOAWAY's last-stream-id) or never read is not.
    pub processed: bool,
}

/// Counters and records shared by a server's tasks.
#[derive(Debug, Default)]
pub struct GroundTruth {
    connections: AtomicUsize,
    /// Connections whose serving task has finished (see [`GroundTruth::settled`]).
    finished: AtomicUsize,
    changed: tokio::sync::Notify,
    bytes_read: AtomicUsize,
    requests: Mutex<Vec<SeenRequest>>,
}

/// Held by a connection's serving task; counts the connection finished when dropped.
pub(crate) struct Serving(Arc<GroundTruth>);

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.finished.fetch_add(1, Ordering::SeqCst);
        self.0.changed.notify_waiters();
    }
}

impl GroundTruth {
    pub(crate) fn connection(&self) {
        self.connections.fetch_add(1, Ordering::SeqCst);
    }

    /// Marks a connection's serving task: finished when the guard drops.
    pub(crate) fn serving(self: &Arc<Self>) -> Serving {
        Serving(self.clone())
    }

    /// Waits until every connection accepted so far has been served to the end, so what the
    /// server recorded about them is final (an event to wait on, not a sleep).
    pub async fn settled(&self) {
        loop {
            let changed = self.changed.notified();
            let mut changed = std::pin::pin!(changed);
            changed.as_mut().enable();
            if self.finished.load(Ordering::SeqCst) >= self.connections() {
                return;
            }
            changed.await;
        }
    }

    pub(crate) fn read(&self, n: usize) {
        self.bytes_read.fetch_add(n, Ordering::SeqCst);
    }

    pub(crate) fn request(&self, request: SeenRequest) {
        self.requests.lock().expect("truth lock").push(request);
        self.changed.notify_waiters();
    }

    /// Waits until the server has seen `n` requests (an event to wait on, not a sleep).
    pub async fn seen_at_least(&self, n: usize) {
        loop {
            let changed = self.changed.notified();
            let mut changed = std::pin::pin!(changed);
            changed.as_mut().enable();
            if self.seen() >= n {
                return;
            }
            changed.await;
        }
    }

    /// Connections accepted.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// Bytes read from clients.
    pub fn bytes_read(&self) -> usize {
        self.bytes_read.load(Ordering::SeqCst)
    }

    /// Every request seen (a request head read, or an HTTP/2 HEADERS frame), in order.
    pub fn requests(&self) -> Vec<SeenRequest> {
        self.requests.lock().expect("truth lock").clone()
    }

    /// Requests seen.
    pub fn seen(&self) -> usize {
        self.requests.lock().expect("truth lock").len()
    }

    /// Requests processed (physical executions).
    pub fn processed(&self) -> usize {
        self.requests().iter().filter(|r| r.processed).count()
    }

    /// Physical executions per idempotency key.
    pub fn executions_by_key(&self) -> HashMap<String, usize> {
        let mut map = HashMap::new();
        for r in self.requests() {
            if let (true, Some(key)) = (r.processed, r.key) {
                *map.entry(key).or_default() += 1;
            }
        }
        map
    }

    /// Logical executions, as a server that deduplicates by key counts them: one per distinct
    /// key, plus every processed request without a key.
    pub fn logical_executions(&self) -> usize {
        let keyless = self
            .requests()
            .iter()
            .filter(|r| r.processed && r.key.is_none())
            .count();
        keyless + self.executions_by_key().len()
    }
}

//! What each request gets: the steps of a scripted upstream.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

/// A response: status, headers, body, and how long the upstream waits before sending it.
///
/// ```
/// use std::time::Duration;
/// use retry_testkit::Reply;
///
/// let busy = Reply::status(503).header("Retry-After", "0").delay(Duration::from_millis(5));
/// assert_eq!(busy.status, 503);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Reply {
    /// The status code (any: 2xx, 3xx, 4xx, 5xx).
    pub status: u16,
    /// Extra headers, written as given (a malformed `Retry-After` included).
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: String,
    /// How long the upstream waits after reading the request before answering.
    pub delay: Duration,
}

impl Reply {
    /// `status` with a short body (`{"status":N}`), no extra header, no delay.
    pub fn status(status: u16) -> Self {
        Reply {
            status,
            headers: Vec::new(),
            body: format!("{{\"status\":{status}}}"),
            delay: Duration::ZERO,
        }
    }

    /// `200 OK` with `body`.
    pub fn ok(body: impl Into<String>) -> Self {
        Reply::status(200).body(body)
    }

    /// Adds a header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Adds `Retry-After: value` (seconds, an HTTP-date, or garbage to test the parser).
    pub fn retry_after(self, value: impl Into<String>) -> Self {
        self.header("Retry-After", value)
    }

    /// Replaces the body.
    pub fn body(mut self, body: impl Into<String>) -> Self {
        self.body = body.into();
        self
    }

    /// Waits `delay` after reading the request before answering (to test attempt timeouts and
    /// hedging; it is real time, so keep it short).
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}

impl From<u16> for Step {
    /// A bare status is [`Step::Respond`] with [`Reply::status`]: `[503, 503, 200]` is a script.
    fn from(status: u16) -> Self {
        Step::Respond(Reply::status(status))
    }
}

impl From<Reply> for Step {
    fn from(reply: Reply) -> Self {
        Step::Respond(reply)
    }
}

/// What the upstream does with one request: HTTP/1.1 applies one step per connection (every
/// answer says `Connection: close`), h2c one step per stream.
///
/// Each step says whether the request was *processed* (read whole, so a real server could have
/// executed it): that is the ground truth an `Ambiguous` outcome is about.
///
/// | step | HTTP/1.1 | h2c | processed | the client's evidence |
/// |---|---|---|---|---|
/// | [`Respond`](Step::Respond) | the reply | the reply | yes | `response_received` |
/// | [`RefuseBeforeRead`](Step::RefuseBeforeRead) | connection reset before reading | `RST_STREAM(REFUSED_STREAM)` | no | h2c: `not_sent`; HTTP/1.1: `not_sent` or `sent_no_response` (the reset races the client's write) |
/// | [`CloseBeforeRead`](Step::CloseBeforeRead) | connection closed (FIN) before reading | `GOAWAY`, then close | no | HTTP/1.1: `not_sent` or `sent_no_response`; h2c: `sent_no_response` (a GOAWAY proves nothing) |
/// | [`ResetAfterRead`](Step::ResetAfterRead) | request read, connection reset | request read, `RST_STREAM(INTERNAL_ERROR)` | yes | `sent_no_response` |
/// | [`CloseAfterRead`](Step::CloseAfterRead) | request read, connection closed before any response | request read, connection dropped | yes | `sent_no_response` |
/// | [`TruncatedBody`](Step::TruncatedBody) | a `200` head and part of the body, then reset | the same, then `RST_STREAM(INTERNAL_ERROR)` | yes | `partial_response` |
///
/// A [`Reply`] delayed past the attempt timeout is `sent_no_response` too.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Step {
    /// Read the request and answer.
    Respond(Reply),
    /// Turn the request away before reading it: the client can prove it was not processed.
    RefuseBeforeRead,
    /// Close the connection before reading the request (HTTP/1.1: a FIN; h2c: a `GOAWAY`
    /// with `NO_ERROR`, then the close; the h2 crate names this stream as the last it may have
    /// processed, so the client cannot tell either way).
    CloseBeforeRead,
    /// Read the whole request, then reset: the request may have been executed and no answer
    /// comes.
    ResetAfterRead,
    /// Read the whole request, then close the connection without answering.
    CloseAfterRead,
    /// Read the request, send a `200` head promising 1000 bytes and part of the body, then
    /// reset.
    TruncatedBody,
}

impl Step {
    /// Whether the upstream reads the request whole before acting (the request counts as
    /// processed).
    pub const fn processes(&self) -> bool {
        !matches!(self, Step::RefuseBeforeRead | Step::CloseBeforeRead)
    }
}

/// The steps in order, then `then` forever.
#[derive(Debug)]
pub(crate) struct Script {
    steps: Mutex<VecDeque<Step>>,
    then: Step,
}

impl Script {
    pub(crate) fn new(steps: impl IntoIterator<Item = Step>, then: Step) -> Self {
        Script {
            steps: Mutex::new(steps.into_iter().collect()),
            then,
        }
    }

    pub(crate) fn next(&self) -> Step {
        let mut steps = self.steps.lock().unwrap_or_else(|e| e.into_inner());
        steps.pop_front().unwrap_or_else(|| self.then.clone())
    }
}

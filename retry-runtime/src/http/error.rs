//! [`HttpError`]: a failed HTTP attempt, with the evidence and the facts the engine decides from.

use std::borrow::Cow;
use std::error::Error as StdError;
use std::fmt;
use std::time::{Duration, SystemTime};

use ::http::{HeaderMap, Method, StatusCode};

use super::classify::ChainFacts;
use crate::category::{PermanentCategory, Pushback};
use crate::classify::Classify;
use crate::decision::Stop;
use crate::evidence::Evidence;
use crate::propagation;

/// Where an HTTP attempt failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HttpErrorKind {
    /// Refused before sending: the request breaks a rule (its method is not the declared one,
    /// a header value is invalid, the URL is invalid). Evidence `NotSent`, permanent.
    Refused,
    /// The operation's deadline had passed before sending. Evidence `NotSent`.
    Deadline,
    /// Sending failed before final response headers (connect, reset, timeout, HTTP/2 reset).
    Transport,
    /// Final headers arrived with a status outside 2xx (3xx included: redirects are reported,
    /// not followed). The response is kept: see [`HttpError::into_response`].
    Status,
    /// The headers arrived, then reading the body failed: evidence `PartialResponse`.
    Body,
    /// The body was complete but could not be decoded: permanent `Decode`.
    Decode,
}

impl HttpErrorKind {
    /// The stable lower-case name.
    pub const fn as_str(self) -> &'static str {
        match self {
            HttpErrorKind::Refused => "refused",
            HttpErrorKind::Deadline => "deadline",
            HttpErrorKind::Transport => "transport",
            HttpErrorKind::Status => "status",
            HttpErrorKind::Body => "body",
            HttpErrorKind::Decode => "decode",
        }
    }
}

/// A failed HTTP attempt: what it is, how far the request got ([`Evidence`]), the response
/// status and the decision headers (`Retry-After`, pushback), and the underlying error as
/// [`source`](StdError::source) (a `reqwest::Error`, or the decoder's error).
///
/// It implements [`Classify`], and converts into [`retry_runtime::Error`](crate::Error) so `?`
/// works inside a retrying closure.
pub struct HttpError {
    inner: Box<Inner>,
}

struct Inner {
    kind: HttpErrorKind,
    evidence: Evidence,
    method: Option<Method>,
    target: Option<String>,
    status: Option<StatusCode>,
    retry_after: Option<Duration>,
    pushback: Option<Pushback>,
    permanent: Option<PermanentCategory>,
    connection_rotated: bool,
    stop: Option<Stop>,
    message: Option<Cow<'static, str>>,
    response: Option<reqwest::Response>,
    headers: Option<HeaderMap>,
    source: Option<Box<dyn StdError + Send + Sync + 'static>>,
}

impl HttpError {
    fn new(kind: HttpErrorKind, evidence: Evidence) -> Self {
        HttpError {
            inner: Box::new(Inner {
                kind,
                evidence,
                method: None,
                target: None,
                status: None,
                retry_after: None,
                pushback: None,
                permanent: None,
                connection_rotated: false,
                stop: None,
                message: None,
                response: None,
                headers: None,
                source: None,
            }),
        }
    }

    pub(crate) fn refused(
        method: &Method,
        target: Option<String>,
        category: PermanentCategory,
        message: impl Into<Cow<'static, str>>,
    ) -> Self {
        let mut e = HttpError::new(HttpErrorKind::Refused, Evidence::NotSent);
        e.inner.method = Some(method.clone());
        e.inner.target = target;
        e.inner.permanent = Some(category);
        e.inner.message = Some(message.into());
        e
    }

    pub(crate) fn deadline(method: &Method, target: Option<String>) -> Self {
        let mut e = HttpError::new(HttpErrorKind::Deadline, Evidence::NotSent);
        e.inner.method = Some(method.clone());
        e.inner.target = target;
        e.inner.message = Some("the operation's deadline passed before sending".into());
        e
    }

    /// A failed `send()`, classified by walking its chain.
    pub(crate) fn from_send(
        method: Option<&Method>,
        target: Option<String>,
        error: reqwest::Error,
    ) -> Self {
        let facts = ChainFacts::of(&error);
        let evidence = facts.send_evidence();
        let mut e = HttpError::new(HttpErrorKind::Transport, evidence);
        e.inner.connection_rotated = facts.connection_rotated();
        e.inner.method = method.cloned();
        e.inner.target = target.or_else(|| error.url().map(target_of));
        e.inner.status = error.status();
        if facts.builder {
            e.inner.kind = HttpErrorKind::Refused;
            e.inner.permanent = Some(PermanentCategory::InvalidRequest);
        }
        e.inner.source = Some(Box::new(error));
        e
    }

    /// A final response outside 2xx; keeps the response so the caller can read its body.
    pub(crate) fn from_status(method: Option<&Method>, response: reqwest::Response) -> Self {
        let mut e = HttpError::new(HttpErrorKind::Status, Evidence::ResponseReceived);
        e.inner.method = method.cloned();
        // The target is rendered from the response's URL only if the error is displayed.
        e.inner.status = Some(response.status());
        let (retry_after, pushback) = decision_headers(response.headers());
        e.inner.retry_after = retry_after;
        e.inner.pushback = pushback;
        e.inner.response = Some(response);
        e
    }

    /// Reading the body failed after the headers arrived.
    pub(crate) fn from_body(
        method: Option<&Method>,
        target: String,
        status: StatusCode,
        headers: HeaderMap,
        error: reqwest::Error,
    ) -> Self {
        let mut e = HttpError::new(HttpErrorKind::Body, Evidence::PartialResponse);
        e.inner.method = method.cloned();
        e.inner.target = Some(target);
        e.inner.status = Some(status);
        e.inner.headers = Some(headers);
        e.inner.source = Some(Box::new(error));
        e
    }

    /// The complete body could not be decoded.
    pub(crate) fn from_decode(
        method: Option<&Method>,
        target: String,
        status: StatusCode,
        headers: HeaderMap,
        error: impl StdError + Send + Sync + 'static,
    ) -> Self {
        let mut e = HttpError::new(HttpErrorKind::Decode, Evidence::ResponseReceived);
        e.inner.method = method.cloned();
        e.inner.target = Some(target);
        e.inner.status = Some(status);
        e.inner.headers = Some(headers);
        e.inner.permanent = Some(PermanentCategory::Decode);
        e.inner.source = Some(Box::new(error));
        e
    }

    /// Where the attempt failed.
    pub fn kind(&self) -> HttpErrorKind {
        self.inner.kind
    }

    /// How far the request is proven to have got.
    pub fn evidence(&self) -> Evidence {
        self.inner.evidence
    }

    /// The response status, when final headers arrived.
    pub fn status(&self) -> Option<StatusCode> {
        self.inner.status
    }

    /// When this was the error a retrying call ended with: the attempts it made and why it
    /// made no further one (also shown at the end of the message).
    pub fn stop(&self) -> Option<Stop> {
        self.inner.stop
    }

    /// The request method, when known.
    pub fn method(&self) -> Option<&Method> {
        self.inner.method.as_ref()
    }

    /// The attempt was lost to connection rotation (HTTP/2 GOAWAY `NO_ERROR` or
    /// `REFUSED_STREAM`, or a request hyper handed back unsent or its dispatcher dropped): see
    /// [`Classify::connection_rotated`].
    pub fn connection_rotated(&self) -> bool {
        self.inner.connection_rotated
    }

    /// The response headers, when final headers arrived.
    pub fn headers(&self) -> Option<&HeaderMap> {
        match &self.inner.response {
            Some(r) => Some(r.headers()),
            None => self.inner.headers.as_ref(),
        }
    }

    /// The server's `Retry-After`, as a delay from when the response arrived (malformed values
    /// are ignored).
    pub fn retry_after(&self) -> Option<Duration> {
        self.inner.retry_after
    }

    /// The callee's pushback header ([`propagation::PUSHBACK`]).
    pub fn pushback(&self) -> Option<Pushback> {
        self.inner.pushback
    }

    /// The response of a [`HttpErrorKind::Status`] error, its body unread.
    pub fn response(&self) -> Option<&reqwest::Response> {
        self.inner.response.as_ref()
    }

    /// Takes the response of a [`HttpErrorKind::Status`] error, to read its body (a problem
    /// document, a 404 the application expects, ...).
    pub fn into_response(self) -> Option<reqwest::Response> {
        self.inner.response
    }

    /// The underlying reqwest error, if this came from reqwest.
    pub fn reqwest_error(&self) -> Option<&reqwest::Error> {
        self.inner.source.as_ref()?.downcast_ref()
    }

    /// What the classifier saw in the reqwest error chain, if this came from reqwest.
    pub fn chain_facts(&self) -> Option<ChainFacts> {
        self.reqwest_error().map(ChainFacts::of)
    }
}

impl HttpError {
    /// `scheme://host[:port]/path` of the request, or `<unknown>`.
    fn target(&self) -> Cow<'_, str> {
        match (&self.inner.target, &self.inner.response) {
            (Some(target), _) => Cow::Borrowed(target),
            (None, Some(response)) => Cow::Owned(target_of(response.url())),
            (None, None) => Cow::Borrowed("<unknown>"),
        }
    }
}

/// `scheme://host[:port]/path`, without userinfo, query or fragment (they may hold secrets).
pub(crate) fn target_of(url: &reqwest::Url) -> String {
    let mut s = format!("{}://{}", url.scheme(), url.host_str().unwrap_or(""));
    if let Some(port) = url.port() {
        s.push(':');
        s.push_str(&port.to_string());
    }
    s.push_str(url.path());
    s
}

/// `Retry-After` and the pushback header, each ignored with a trace event when malformed.
fn decision_headers(headers: &HeaderMap) -> (Option<Duration>, Option<Pushback>) {
    let retry_after = headers
        .get(::http::header::RETRY_AFTER)
        .and_then(|v| crate::retry_after::parse_header(v.as_bytes(), SystemTime::now()));
    let pushback = headers
        .get(&crate::propagation::PUSHBACK_NAME)
        .and_then(|v| propagation::parse_pushback(v.as_bytes()));
    (retry_after, pushback)
}

impl fmt::Debug for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = &self.inner;
        f.debug_struct("HttpError")
            .field("kind", &i.kind)
            .field("evidence", &i.evidence)
            .field("method", &i.method)
            .field("target", &self.target())
            .field("status", &i.status)
            .field("retry_after", &i.retry_after)
            .field("pushback", &i.pushback)
            .field("permanent", &i.permanent)
            .field("connection_rotated", &i.connection_rotated)
            .field("message", &i.message)
            .field("source", &i.source)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = &self.inner;
        let method = i.method.as_ref().map_or("", Method::as_str);
        let target = self.target();
        let status = i.status.map(|s| s.as_u16()).unwrap_or(0);
        match i.kind {
            HttpErrorKind::Refused | HttpErrorKind::Deadline => write!(
                f,
                "refused to send {method} {target}: {}",
                i.message.as_deref().unwrap_or("invalid request")
            ),
            HttpErrorKind::Transport => write!(
                f,
                "{method} {target} failed before a response (evidence {})",
                i.evidence
            ),
            HttpErrorKind::Status => write!(f, "{method} {target} answered {status}"),
            HttpErrorKind::Body => write!(
                f,
                "the body of {method} {target} ({status}) broke off (evidence {})",
                i.evidence
            ),
            HttpErrorKind::Decode => write!(
                f,
                "the complete body of {method} {target} ({status}) could not be decoded"
            ),
        }?;
        if let Some(source) = &i.source {
            write!(f, ": {source}")?;
        }
        if let Some(stop) = &i.stop {
            write!(f, " ({stop})")?;
        }
        Ok(())
    }
}

impl StdError for HttpError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.inner
            .source
            .as_deref()
            .map(|e| e as &(dyn StdError + 'static))
    }
}

impl Classify for HttpError {
    fn evidence(&self) -> Evidence {
        self.inner.evidence
    }
    fn status(&self) -> Option<u16> {
        self.inner.status.map(|s| s.as_u16())
    }
    fn retry_after(&self) -> Option<Duration> {
        self.inner.retry_after
    }
    fn permanent(&self) -> Option<PermanentCategory> {
        self.inner.permanent
    }
    fn pushback(&self) -> Option<Pushback> {
        self.inner.pushback
    }
    fn connection_rotated(&self) -> bool {
        self.inner.connection_rotated
    }
    fn timed_out(&self) -> bool {
        // A connect timeout is a connection that never opened (`NotSent`), not an answer late.
        self.inner.evidence != Evidence::NotSent
            && self.reqwest_error().is_some_and(reqwest::Error::is_timeout)
    }
    fn stopped(&mut self, stop: Stop) {
        self.inner.stop = Some(stop);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync + 'static>() {}

    #[test]
    fn is_send_sync_and_small() {
        assert_send_sync::<HttpError>();
        assert_eq!(
            std::mem::size_of::<HttpError>(),
            std::mem::size_of::<usize>()
        );
    }

    #[test]
    fn targets_drop_secrets() {
        let url = reqwest::Url::parse("https://user:pw@api.example:8443/pay?token=s#f").unwrap();
        assert_eq!(target_of(&url), "https://api.example:8443/pay");
    }

    #[test]
    fn malformed_decision_headers_are_ignored() {
        let mut h = HeaderMap::new();
        h.insert(::http::header::RETRY_AFTER, "soon".parse().unwrap());
        h.insert(propagation::PUSHBACK, "maybe".parse().unwrap());
        assert_eq!(decision_headers(&h), (None, None));
        h.insert(::http::header::RETRY_AFTER, "2".parse().unwrap());
        h.insert(propagation::PUSHBACK, "overloaded".parse().unwrap());
        assert_eq!(
            decision_headers(&h),
            (Some(Duration::from_secs(2)), Some(Pushback::Overloaded))
        );
    }

    #[test]
    fn refusals_are_permanent_and_not_sent() {
        let e = HttpError::refused(
            &Method::POST,
            None,
            PermanentCategory::InvalidRequest,
            "declared GET",
        );
        assert_eq!(Classify::evidence(&e), Evidence::NotSent);
        assert_eq!(e.permanent(), Some(PermanentCategory::InvalidRequest));
        assert!(e.to_string().contains("declared GET"), "{e}");
    }
}

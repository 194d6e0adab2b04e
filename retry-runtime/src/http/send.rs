//! The send path: one request of one attempt.

use std::future::Future;

use ::http::{HeaderName, HeaderValue};

use super::error::{HttpError, target_of};
use super::headers;
use crate::attempt::Attempt;
use crate::category::PermanentCategory;
use crate::replay::Replayability;

/// Sends a `reqwest::RequestBuilder` as (part of) the current attempt. See the [module
/// docs](super) for what it adds and checks.
pub trait RequestBuilderExt: super::sealed::Sealed {
    /// Sends the request and classifies the outcome.
    ///
    /// - `Ok(response)` for a 2xx status; the body is unread (use
    ///   [`ResponseExt`](super::ResponseExt) to buffer it inside the attempt).
    /// - `Err` of kind [`Status`](super::HttpErrorKind::Status) for any other status (a 3xx is
    ///   reported, not followed), carrying the response, its `Retry-After` and pushback.
    /// - `Err` of kind [`Transport`](super::HttpErrorKind::Transport) when no final headers
    ///   arrived, with the evidence the error chain proves.
    /// - `Err` of kind [`Refused`](super::HttpErrorKind::Refused) or
    ///   [`Deadline`](super::HttpErrorKind::Deadline) when nothing was sent.
    fn send_attempt(self) -> impl Future<Output = Result<reqwest::Response, HttpError>> + Send;
}

impl RequestBuilderExt for reqwest::RequestBuilder {
    fn send_attempt(self) -> impl Future<Output = Result<reqwest::Response, HttpError>> + Send {
        send(self)
    }
}

async fn send(builder: reqwest::RequestBuilder) -> Result<reqwest::Response, HttpError> {
    let (client, request) = builder.build_split();
    let mut request = match request {
        Ok(request) => request,
        // An invalid URL or header: `is_builder()`, nothing sent, permanent.
        Err(e) => {
            let declared = Attempt::with_current(|a| a.map(|a| a.method().clone()));
            return Err(HttpError::from_send(declared.as_ref(), None, e));
        }
    };
    let method = request.method().clone();
    // Read in place (no copy of the attempt): the checks and headers, and the span to record
    // the status on (a disabled span would still look the field up by name).
    let span = Attempt::with_current(|attempt| match attempt {
        Some(attempt) => prepare(&mut request, attempt)
            .map(|()| Some(attempt.span()).filter(|s| !s.is_disabled()).cloned()),
        None => Ok(None),
    })?;
    // Reported outside `with_current` (which holds the attempt while it runs).
    if request.body().is_some_and(|b| b.as_bytes().is_none()) {
        // A streaming body cannot be produced again: this attempt is sent, no other will be.
        Attempt::report_body(Replayability::OneShot);
        tracing::debug!(
            target: "retry_runtime::http",
            "streaming request body: this attempt is sent but the call will not be retried"
        );
    }
    match client.execute(request).await {
        Ok(response) => {
            let status = response.status();
            if let Some(span) = span {
                span.record("http.response.status_code", status.as_u16());
            }
            if status.is_success() {
                Ok(response)
            } else {
                Err(HttpError::from_status(Some(&method), response))
            }
        }
        // The target (no query, no user info) is rendered only when something failed.
        Err(e) => {
            let target = e.url().map(target_of);
            Err(HttpError::from_send(Some(&method), target, e))
        }
    }
}

/// The checks and headers for a request sent inside `attempt`. Everything that can
/// refuse runs before anything is sent.
fn prepare(request: &mut reqwest::Request, attempt: &Attempt) -> Result<(), HttpError> {
    // Rendered only when something is refused (the happy path allocates nothing for it).
    let target = |request: &reqwest::Request| Some(target_of(request.url()));
    let method = request.method().clone();
    let span = attempt.span();
    if !span.is_disabled() {
        if let Some(host) = request.url().host_str() {
            span.record("server.address", host);
        }
        if let Some(port) = request.url().port_or_known_default() {
            span.record("server.port", port);
        }
    }
    // The loop decides with the declared method. A request at least as safe as that (a HEAD
    // under a GET, a GET checking a write's result under a POST) is decided more cautiously
    // than it needs; a write other than the declared one would be decided too boldly.
    if method != *attempt.method() && !method.is_safe() {
        return Err(HttpError::refused(
            &method,
            target(request),
            PermanentCategory::InvalidRequest,
            format!(
                "the call was declared {} but this request is {method}: declare the method the \
                 request really uses (a write needs an idempotency key or a reconcile check)",
                attempt.method()
            ),
        ));
    }
    let remaining = attempt.remaining();
    if remaining.is_zero() {
        return Err(HttpError::deadline(&method, target(request)));
    }
    if let Some(key) = attempt.idempotency_key() {
        let config = attempt.upstream_entry().config();
        let name = HeaderName::from_bytes(config.idempotency_header.as_bytes()).map_err(|_| {
            HttpError::refused(
                &method,
                target(request),
                PermanentCategory::Configuration,
                format!(
                    "upstream `{}`: idempotency_header {:?} is not a valid header name; use \"{}\"",
                    attempt.upstream(),
                    config.idempotency_header,
                    headers::IDEMPOTENCY_KEY
                ),
            )
        })?;
        // The draft's field carries the key as an RFC 8941 string (quoted, `"` and `\`
        // escaped), which a server parsing it strictly requires; an upstream that renamed the
        // header has its own convention and gets the key as it is. The key was validated by
        // `IdempotencyKey::new`; a mismatch with the header grammar is refused rather than
        // panicking. The message names the fingerprint, never the key.
        let wire = if name.as_str().eq_ignore_ascii_case(headers::IDEMPOTENCY_KEY) {
            std::borrow::Cow::Owned(key.to_sf_string())
        } else {
            std::borrow::Cow::Borrowed(key.as_str())
        };
        let value = HeaderValue::from_str(&wire).map_err(|_| {
            HttpError::refused(
                &method,
                target(request),
                PermanentCategory::InvalidRequest,
                format!("the idempotency key {key} is not a valid header value: use a UUID"),
            )
        })?;
        let mut value = value;
        value.set_sensitive(true);
        request.headers_mut().insert(name, value);
    }
    // Attempt number, how long we still wait for this attempt and the operation's retries
    // left, so the callee stops when we have given up and does not add its retries on top of
    // ours. The wait is the attempt's (its timeout, clamped to the deadline), not the
    // operation's: whatever the callee does after this attempt is cut is done for nobody.
    if attempt.upstream_entry().config().propagate {
        let headers = request.headers_mut();
        crate::propagation::write_headers(
            headers,
            attempt.time_left(),
            attempt.number(),
            attempt.retries_left(),
        );
    }
    // The attempt's timeout (clamped to the deadline) is the loop's: it cuts this request and
    // reports `AttemptTimeout` with evidence `SentNoResponse`, the same class reqwest's timeout
    // would give. A reqwest per-request timeout as well (a second timer per request) cost 5-10 %
    // of a loopback request when measured, so only a tighter timeout the caller set is kept.
    // (`timeout_mut` would insert an empty entry into the request's extensions: read first.)
    if request.timeout().is_some_and(|t| *t >= attempt.time_left()) {
        *request.timeout_mut() = None;
    }
    Ok(())
}

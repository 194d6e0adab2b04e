//! The send path: one request of one attempt.

use std::future::Future;
use std::time::Duration;

use ::http::{HeaderName, HeaderValue};

use super::error::{HttpError, target_of};
use super::headers;
use crate::{Attempt, PermanentCategory, Replayability};

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
    let target = target_of(request.url());
    let attempt = Attempt::current();
    if let Some(attempt) = &attempt {
        prepare(&mut request, attempt, &target)?;
    }
    match client.execute(request).await {
        Ok(response) => {
            let status = response.status();
            if let Some(attempt) = &attempt {
                attempt
                    .span()
                    .record("http.response.status_code", status.as_u16());
            }
            if status.is_success() {
                Ok(response)
            } else {
                Err(HttpError::from_status(Some(&method), response))
            }
        }
        Err(e) => Err(HttpError::from_send(Some(&method), Some(target), e)),
    }
}

/// The checks and headers of spec 000 for a request sent inside `attempt`. Everything that can
/// refuse runs before anything is sent.
fn prepare(
    request: &mut reqwest::Request,
    attempt: &Attempt,
    target: &str,
) -> Result<(), HttpError> {
    let method = request.method().clone();
    let span = attempt.span();
    if let Some(host) = request.url().host_str() {
        span.record("server.address", host);
    }
    if let Some(port) = request.url().port_or_known_default() {
        span.record("server.port", port);
    }
    if method != *attempt.method() {
        return Err(HttpError::refused(
            &method,
            Some(target.to_owned()),
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
        return Err(HttpError::deadline(&method, Some(target.to_owned())));
    }
    let headers = request.headers_mut();
    if let Some(key) = attempt.idempotency_key() {
        let config = attempt.upstream_entry().config();
        let name = HeaderName::from_bytes(config.idempotency_header.as_bytes()).map_err(|_| {
            HttpError::refused(
                &method,
                Some(target.to_owned()),
                PermanentCategory::Configuration,
                format!(
                    "upstream `{}`: idempotency_header {:?} is not a valid header name; use \"{}\"",
                    attempt.upstream(),
                    config.idempotency_header,
                    headers::IDEMPOTENCY_KEY
                ),
            )
        })?;
        // The key was validated by `IdempotencyKey::new`; a mismatch with the header grammar is
        // refused rather than panicking. The message names the fingerprint, never the key.
        let value = HeaderValue::from_str(key.as_str()).map_err(|_| {
            HttpError::refused(
                &method,
                Some(target.to_owned()),
                PermanentCategory::InvalidRequest,
                format!("the idempotency key {key} is not a valid header value: use a UUID"),
            )
        })?;
        let mut value = value;
        value.set_sensitive(true);
        headers.insert(name, value);
    }
    // Attempt number, remaining deadline and the operation's retries left, so the callee stops
    // when we have given up and does not add its retries on top of ours.
    crate::propagation::write_headers(headers, remaining, attempt.number(), attempt.retries_left());
    // The attempt's own timeout is enforced by the loop too; setting it here makes reqwest fire
    // first, so the error is a classified transport error instead of a bare attempt timeout.
    // A margin (a tenth, at most 20 ms) so reqwest's timeout, which classifies, wins the race
    // against the loop's backstop timeout started slightly earlier.
    let left = attempt.time_left();
    let limit = left.saturating_sub((left / 10).min(Duration::from_millis(20)));
    let timeout = request.timeout_mut();
    *timeout = Some(timeout.map_or(limit, |t| t.min(limit)));
    // A streaming body cannot be produced again: this attempt is sent, no other will be.
    if request.body().is_some_and(|b| b.as_bytes().is_none()) {
        Attempt::report_body(Replayability::OneShot);
        tracing::debug!(
            target: "retry_runtime::http",
            "streaming request body: this attempt is sent but the call will not be retried"
        );
    }
    Ok(())
}

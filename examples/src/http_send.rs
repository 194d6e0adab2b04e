//! Sending one attempt with reqwest and saying how far it got (interim: replaced by
//! `retry_runtime::http`'s send path once it lands).

use std::fmt;
use std::time::{Duration, SystemTime};

use retry_runtime::{Attempt, Classify, Evidence, Operation, Pushback, propagation};

/// A failed HTTP attempt: a status outside 2xx, or a transport failure with its evidence.
#[derive(Debug)]
pub struct HttpError {
    /// How far the request got.
    pub evidence: Evidence,
    /// The status, when a response arrived.
    pub status: Option<u16>,
    /// The response's `Retry-After`, as a delay.
    pub retry_after: Option<Duration>,
    /// The callee's pushback signal.
    pub pushback: Option<Pushback>,
    /// The response's headers, when one arrived.
    pub headers: Option<http::HeaderMap>,
    message: String,
}

impl HttpError {
    fn transport(e: &reqwest::Error) -> Self {
        // With redirects off, a connect failure proves the request was not sent; anything else
        // (a reset, a timeout, an early close) may have reached the server.
        let evidence = if e.is_connect() {
            Evidence::NotSent
        } else {
            Evidence::SentNoResponse
        };
        HttpError {
            evidence,
            status: None,
            retry_after: None,
            pushback: None,
            headers: None,
            message: error_chain(e),
        }
    }

    fn status(response: &reqwest::Response) -> Self {
        let headers = response.headers().clone();
        HttpError {
            evidence: Evidence::ResponseReceived,
            status: Some(response.status().as_u16()),
            retry_after: headers
                .get(http::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| retry_runtime::retry_after::parse(v, SystemTime::now()).ok()),
            pushback: propagation::pushback(&headers),
            message: format!("status {}", response.status()),
            headers: Some(headers),
        }
    }
}

fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for HttpError {}

impl Classify for HttpError {
    fn evidence(&self) -> Evidence {
        self.evidence
    }
    fn status(&self) -> Option<u16> {
        self.status
    }
    fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }
    fn pushback(&self) -> Option<Pushback> {
        self.pushback
    }
}

/// A reqwest client the classification can trust: no redirects, no protocol retries.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .retry(reqwest::retry::never())
        .connect_timeout(Duration::from_millis(150))
        .pool_max_idle_per_host(64)
        .build()
        .expect("a plain HTTP client builds")
}

/// Sends `request` as the current attempt: adds the idempotency key, the attempt number, the
/// remaining deadline and the operation's retries left, clamps the timeout to the attempt's,
/// and returns the 2xx response or a classified [`HttpError`].
pub async fn send_attempt(
    request: reqwest::RequestBuilder,
) -> Result<reqwest::Response, HttpError> {
    let mut request = request;
    if let Some(attempt) = Attempt::current() {
        let mut headers = http::HeaderMap::new();
        let retries_left = Operation::current().and_then(|op| op.retries_left());
        propagation::write_headers(
            &mut headers,
            attempt.timeout(),
            attempt.number(),
            retries_left,
        );
        if let Some(key) = attempt.idempotency_key() {
            let name = &attempt.upstream_entry().config().idempotency_header;
            if let (Ok(name), Ok(value)) = (
                http::HeaderName::from_bytes(name.as_bytes()),
                http::HeaderValue::from_str(key.as_str()),
            ) {
                headers.insert(name, value);
            }
        }
        request = request.headers(headers).timeout(attempt.timeout());
    }
    match request.send().await {
        Ok(response) if response.status().is_success() => Ok(response),
        Ok(response) => Err(HttpError::status(&response)),
        Err(e) => Err(HttpError::transport(&e)),
    }
}

/// Reads the whole body inside the attempt (a reset mid-body is a transport failure).
pub async fn read_bytes(response: reqwest::Response) -> Result<bytes::Bytes, HttpError> {
    response.bytes().await.map_err(|e| {
        let mut err = HttpError::transport(&e);
        err.evidence = Evidence::PartialResponse;
        err
    })
}

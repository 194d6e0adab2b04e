//! Client settings that keep the classification sound.

use std::time::Duration;

use crate::config::UpstreamConfig;

/// The connect timeout [`client_builder`] sets: well below the default 1 s attempt timeout, so
/// a stalled connect surfaces as a provable `NotSent` (`is_connect && is_timeout`) rather than
/// an ambiguous attempt timeout.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// A `reqwest::ClientBuilder` the classifier can trust.
///
/// # Default
/// - `redirect(Policy::none())`: a 3xx is returned (and reported by
///   [`send_attempt`](super::RequestBuilderExt::send_attempt) as a status error), never
///   followed. With automatic redirects a connect error on the second hop looks exactly like a
///   connect error on the first, so a POST that was executed would be classified `NotSent`.
/// - `retry(reqwest::retry::never())`: reqwest 0.13 retries HTTP/2 `REFUSED_STREAM` and
///   GOAWAY by itself, up to twice per request with no shared budget, hiding attempts from the
///   retry budget and the attempt count. The engine retries those itself (they are `NotSent`).
/// - `connect_timeout(`[`DEFAULT_CONNECT_TIMEOUT`]`)`, and no request timeout: the upstream's
///   attempt timeout ends an attempt.
///
/// Add TLS, pools, proxies and so on as usual; do not re-enable redirects or retries.
pub fn client_builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .retry(reqwest::retry::never())
        .connect_timeout(DEFAULT_CONNECT_TIMEOUT)
}

/// [`client_builder`] with the connect timeout fitted to an upstream: half its attempt timeout,
/// at most [`DEFAULT_CONNECT_TIMEOUT`], at least 1 ms.
pub fn client_builder_for(config: &UpstreamConfig) -> reqwest::ClientBuilder {
    client_builder().connect_timeout(connect_timeout_for(config))
}

fn connect_timeout_for(config: &UpstreamConfig) -> Duration {
    (config.attempt_timeout() / 2).clamp(Duration::from_millis(1), DEFAULT_CONNECT_TIMEOUT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_timeout_is_below_the_attempt_timeout() {
        let c = UpstreamConfig::new().with_attempt_timeout(Duration::from_millis(300));
        assert_eq!(connect_timeout_for(&c), Duration::from_millis(150));
        assert_eq!(
            connect_timeout_for(&UpstreamConfig::new()),
            DEFAULT_CONNECT_TIMEOUT
        );
        let c = UpstreamConfig::new().with_attempt_timeout(Duration::from_nanos(1));
        assert_eq!(connect_timeout_for(&c), Duration::from_millis(1));
    }
}

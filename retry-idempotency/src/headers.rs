//! The headers the layer sets on the responses it answers.

use http::header::HeaderName;

/// Set to `true` on every replayed response (the name Stripe's API uses).
pub const REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// Set on a response whose body will not be replayed as sent, with the reason: `too-large`
/// (above [`with_max_stored_body`](crate::IdempotencyLayerBuilder::with_max_stored_body)),
/// `trailers`, `body-error` (the handler's body failed), `lease-lost` (the run's lease lapsed
/// and another request took the key over: that run's response is the one replayed), or
/// `store-error` (the response could not be written; the key is given back when its lease
/// lapses). A replay of a response whose body was not kept carries it too, with an empty body.
pub const NOT_STORED: HeaderName = HeaderName::from_static("idempotency-not-stored");

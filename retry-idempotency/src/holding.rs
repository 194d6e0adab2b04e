//! A run's hold on its key: given back when the run fails, is not processed, or is dropped
//! before completing; completed with the handler's response otherwise.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use http::header::HeaderValue;
use http::{Response, StatusCode};
use http_body::Body;
use http_body_util::BodyExt;

use crate::body::{BoxError, IdempotentBody};
use crate::config::Config;
use crate::headers::NOT_STORED;
use crate::key::Key;
use crate::record;
use crate::store::{Completed, Held, KeyStore};

/// A run holding a key: gives it back when dropped before completing (the request was
/// cancelled while it took the key, the handler panicked, or the runtime shut down under it):
/// a retry may run at once instead of waiting out the lease.
pub(crate) struct Holding<K: KeyStore> {
    store: K,
    scope: [u8; 32],
    key: Key,
    token: i64,
    armed: bool,
}

impl<K: KeyStore> Holding<K> {
    /// The guard of a run about to take `key` with `token`, armed before the write that may
    /// take it: the release it makes when dropped is fenced on the token, so it gives back
    /// the key only if this run took it.
    pub(crate) fn taking(store: &K, scope: [u8; 32], key: &Key, token: i64) -> Self {
        Holding {
            store: store.clone(),
            scope,
            key: key.clone(),
            token,
            armed: true,
        }
    }

    /// The write did not take the key: nothing to give back.
    pub(crate) fn disarm(mut self) {
        self.armed = false;
    }

    fn held(&self) -> Held<'_> {
        Held {
            scope: &self.scope,
            key: self.key.as_str(),
            token: self.token,
        }
    }

    async fn release(mut self) {
        self.armed = false;
        if let Err(e) = self.store.release(&self.held()).await {
            tracing::warn!(target: "retry_idempotency", error = %e,
                "could not give a key back; it is free again once its lease lapses");
        }
    }
}

impl<K: KeyStore> Drop for Holding<K> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let store = self.store.clone();
            let scope = self.scope;
            let key = self.key.clone();
            let token = self.token;
            runtime.spawn(async move {
                let held = Held {
                    scope: &scope,
                    key: key.as_str(),
                    token,
                };
                if let Err(e) = store.release(&held).await {
                    tracing::warn!(target: "retry_idempotency", error = %e,
                        "could not give back the key of a cancelled request; it is free again once its lease lapses");
                }
            });
        }
    }
}

/// The statuses that say the request was not processed: the key is given back, and the
/// client's retry runs the handler (a 5xx too, unless server errors are stored).
fn gives_key_back(status: StatusCode, store_server_errors: bool) -> bool {
    status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
        || (status.is_server_error() && !store_server_errors)
}

/// Awaits the handler's response, reads it up to what is stored, and completes the key.
pub(crate) async fn finish<K, RB, E>(
    holding: Holding<K>,
    config: Arc<Config>,
    call: impl Future<Output = Result<Response<RB>, E>>,
) -> Result<Response<IdempotentBody<RB>>, E>
where
    K: KeyStore,
    RB: Body<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
{
    let response = match call.await {
        Ok(response) => response,
        Err(e) => {
            holding.release().await;
            return Err(e);
        }
    };
    let (mut parts, body) = response.into_parts();
    if gives_key_back(parts.status, config.store_server_errors) {
        holding.release().await;
        return Ok(Response::from_parts(
            parts,
            IdempotentBody::inner(Box::pin(body)),
        ));
    }

    // Read the response, up to what is stored.
    let mut body = Box::pin(body);
    let mut frames = VecDeque::new();
    let mut size = 0usize;
    let mut failed = None;
    let mut not_stored = None;
    if body.size_hint().lower() > config.max_stored_body as u64 {
        not_stored = Some("too-large");
    }
    while not_stored.is_none() {
        match body.frame().await {
            None => break,
            Some(Ok(frame)) => {
                match frame.data_ref() {
                    Some(data) => size = size.saturating_add(data.len()),
                    None => not_stored = Some("trailers"),
                }
                frames.push_back(frame);
                if size > config.max_stored_body {
                    not_stored = Some("too-large");
                }
            }
            Some(Err(e)) => {
                failed = Some(e.into());
                not_stored = Some("body-error");
            }
        }
    }
    let stored_body = match not_stored {
        None => {
            let mut all = BytesMut::with_capacity(size);
            for frame in &frames {
                if let Some(data) = frame.data_ref() {
                    all.extend_from_slice(data);
                }
            }
            Some(all.freeze())
        }
        Some(_) => None,
    };
    let headers = record::encode(&parts.headers, &config.stored_headers);
    let completed = Completed {
        status: parts.status.as_u16(),
        headers: &headers,
        body: stored_body.as_deref().unwrap_or_default(),
        not_stored,
    };
    let mut mark = not_stored;
    let mut holding = holding;
    holding.armed = false;
    match holding
        .store
        .complete(&holding.held(), &completed, config.clock.now())
        .await
    {
        Ok(true) => {}
        Ok(false) => {
            tracing::warn!(target: "retry_idempotency", event = "lease_lost",
                "a request finished after its lease lapsed and another request took its key: \
                 its response is answered but not stored");
            mark = Some("lease-lost");
        }
        Err(e) => {
            tracing::error!(target: "retry_idempotency", event = "store_error", error = %e,
                "a completed request's response could not be stored; its key is free again \
                 once its lease lapses");
            mark = Some("store-error");
        }
    }
    if let Some(why) = mark {
        parts
            .headers
            .insert(NOT_STORED, HeaderValue::from_static(why));
    }
    let body = match stored_body {
        Some(bytes) => IdempotentBody::full(bytes),
        None => {
            let rest = failed.is_none().then_some(body);
            IdempotentBody::resumed(frames, rest, failed)
        }
    };
    Ok(Response::from_parts(parts, body))
}

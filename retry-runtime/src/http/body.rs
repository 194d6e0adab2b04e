//! Reading a response body inside the attempt.
//!
//! A body read after the retry loop returned cannot be retried: the loop already answered
//! "success". Buffering it inside the attempt turns a reset mid-body into a
//! `PartialResponse` the engine can retry for a safe operation, and separates it from a body
//! that arrived whole but does not decode (a permanent `Decode` failure, not a transport one).

use std::future::Future;

use bytes::{Bytes, BytesMut};
use serde::de::DeserializeOwned;

use super::error::{HttpError, target_of};
use crate::attempt::Attempt;

/// Buffers a response body inside the attempt, classifying failures.
pub trait ResponseExt: super::sealed::Sealed {
    /// The whole body. A failure while reading (reset, EOF, HTTP/2 reset, timeout) is
    /// [`HttpErrorKind::Body`](super::HttpErrorKind::Body) with evidence `PartialResponse`.
    fn read_bytes(self) -> impl Future<Output = Result<Bytes, HttpError>> + Send;

    /// The whole body as UTF-8 text; invalid UTF-8 is a permanent `Decode` failure.
    fn read_text(self) -> impl Future<Output = Result<String, HttpError>> + Send;

    /// The whole body as JSON; a body that arrived whole but does not parse is a permanent
    /// `Decode` failure with evidence `ResponseReceived`.
    fn read_json<T: DeserializeOwned>(self) -> impl Future<Output = Result<T, HttpError>> + Send;
}

impl ResponseExt for reqwest::Response {
    async fn read_bytes(self) -> Result<Bytes, HttpError> {
        read(self).await.map(|(bytes, _)| bytes)
    }

    async fn read_text(self) -> Result<String, HttpError> {
        let (bytes, response) = read(self).await?;
        String::from_utf8(bytes.to_vec()).map_err(|e| decode(response, e))
    }

    async fn read_json<T: DeserializeOwned>(self) -> Result<T, HttpError> {
        let (bytes, response) = read(self).await?;
        serde_json::from_slice(&bytes).map_err(|e| decode(response, e))
    }
}

/// The body, read chunk by chunk so the response (its URL, status and headers) stays whole for
/// an error report without being copied on the way: nothing is cloned or rendered unless
/// something fails. A body that arrives in one chunk is returned as that chunk.
async fn read(mut response: reqwest::Response) -> Result<(Bytes, reqwest::Response), HttpError> {
    let first = match response.chunk().await {
        Ok(Some(chunk)) => chunk,
        Ok(None) => return Ok((Bytes::new(), response)),
        Err(e) => return Err(body_failed(response, e)),
    };
    let mut whole = match response.chunk().await {
        Ok(Some(second)) => {
            let mut whole = BytesMut::with_capacity(first.len() + second.len());
            whole.extend_from_slice(&first);
            whole.extend_from_slice(&second);
            whole
        }
        Ok(None) => return Ok((first, response)),
        Err(e) => return Err(body_failed(response, e)),
    };
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => whole.extend_from_slice(&chunk),
            Ok(None) => return Ok((whole.freeze(), response)),
            Err(e) => return Err(body_failed(response, e)),
        }
    }
}

fn declared_method() -> Option<::http::Method> {
    Attempt::with_current(|a| a.map(|a| a.method().clone()))
}

fn body_failed(mut response: reqwest::Response, e: reqwest::Error) -> HttpError {
    HttpError::from_body(
        declared_method().as_ref(),
        target_of(response.url()),
        response.status(),
        std::mem::take(response.headers_mut()),
        e,
    )
}

fn decode(
    mut response: reqwest::Response,
    e: impl std::error::Error + Send + Sync + 'static,
) -> HttpError {
    HttpError::from_decode(
        declared_method().as_ref(),
        target_of(response.url()),
        response.status(),
        std::mem::take(response.headers_mut()),
        e,
    )
}

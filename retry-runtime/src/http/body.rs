//! Reading a response body inside the attempt.
//!
//! A body read after the retry loop returned cannot be retried: the loop already answered
//! "success". Buffering it inside the attempt turns a reset mid-body into a
//! `PartialResponse` the engine can retry for a safe operation, and separates it from a body
//! that arrived whole but does not decode (a permanent `Decode` failure, not a transport one).

use std::future::Future;

use bytes::Bytes;
use serde::de::DeserializeOwned;

use super::error::{HttpError, target_of};
use crate::Attempt;

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
        let (bytes, meta) = read(self).await?;
        String::from_utf8(bytes.to_vec()).map_err(|e| meta.decode(e))
    }

    async fn read_json<T: DeserializeOwned>(self) -> Result<T, HttpError> {
        let (bytes, meta) = read(self).await?;
        serde_json::from_slice(&bytes).map_err(|e| meta.decode(e))
    }
}

/// What is kept of a response once its body is read, to report a decode failure.
struct Meta {
    method: Option<::http::Method>,
    target: String,
    status: ::http::StatusCode,
    headers: ::http::HeaderMap,
}

impl Meta {
    fn decode(self, e: impl std::error::Error + Send + Sync + 'static) -> HttpError {
        HttpError::from_decode(
            self.method.as_ref(),
            self.target,
            self.status,
            self.headers,
            e,
        )
    }
}

async fn read(response: reqwest::Response) -> Result<(Bytes, Meta), HttpError> {
    let meta = Meta {
        method: Attempt::with_current(|a| a.map(|a| a.method().clone())),
        target: target_of(response.url()),
        status: response.status(),
        headers: response.headers().clone(),
    };
    match response.bytes().await {
        Ok(bytes) => Ok((bytes, meta)),
        Err(e) => Err(HttpError::from_body(
            meta.method.as_ref(),
            meta.target,
            meta.status,
            meta.headers,
            e,
        )),
    }
}

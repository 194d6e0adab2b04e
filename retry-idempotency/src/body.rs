//! The layer's response body: bytes it holds (a replay, a problem, a stored response), or the
//! handler's body with the frames the layer already read put back in front.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

/// The error type of [`IdempotentBody`]: the handler body's own error, boxed.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A response body from the [`Idempotency`](crate::Idempotency) service.
pub struct IdempotentBody<B> {
    kind: Kind<B>,
}

enum Kind<B> {
    Full(Option<Bytes>),
    Stream {
        read: VecDeque<Frame<Bytes>>,
        rest: Option<Pin<Box<B>>>,
        /// The handler body's error met while the layer read it, given after `read`.
        failed: Option<BoxError>,
    },
}

impl<B> IdempotentBody<B> {
    /// A body of these bytes.
    pub fn full(bytes: Bytes) -> Self {
        IdempotentBody {
            kind: Kind::Full((!bytes.is_empty()).then_some(bytes)),
        }
    }

    /// The handler's body, unread.
    pub(crate) fn inner(body: Pin<Box<B>>) -> Self {
        Self::resumed(VecDeque::new(), Some(body), None)
    }

    /// Frames already read from the handler's body, then its error if reading it failed, or
    /// else the rest of it (if any is left).
    pub(crate) fn resumed(
        read: VecDeque<Frame<Bytes>>,
        rest: Option<Pin<Box<B>>>,
        failed: Option<BoxError>,
    ) -> Self {
        IdempotentBody {
            kind: Kind::Stream { read, rest, failed },
        }
    }
}

impl<B> fmt::Debug for IdempotentBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Full(b) => f
                .debug_tuple("IdempotentBody::Full")
                .field(&b.as_ref().map_or(0, Bytes::len))
                .finish(),
            Kind::Stream { read, rest, failed } => f
                .debug_struct("IdempotentBody::Stream")
                .field("read_frames", &read.len())
                .field("more", &rest.is_some())
                .field("failed", failed)
                .finish(),
        }
    }
}

impl<B> Body for IdempotentBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        // Every field is Unpin (the handler's body is boxed).
        match &mut self.get_mut().kind {
            Kind::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Kind::Stream { read, rest, failed } => {
                if let Some(frame) = read.pop_front() {
                    return Poll::Ready(Some(Ok(frame)));
                }
                if let Some(e) = failed.take() {
                    *rest = None;
                    return Poll::Ready(Some(Err(e)));
                }
                let Some(body) = rest else {
                    return Poll::Ready(None);
                };
                match body.as_mut().poll_frame(cx) {
                    Poll::Ready(None) => {
                        *rest = None;
                        Poll::Ready(None)
                    }
                    Poll::Ready(Some(r)) => Poll::Ready(Some(r.map_err(Into::into))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Full(b) => b.is_none(),
            Kind::Stream { read, rest, failed } => {
                read.is_empty()
                    && failed.is_none()
                    && rest.as_ref().is_none_or(|b| b.is_end_stream())
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            Kind::Stream { read, rest, .. } => {
                let buffered: u64 = read
                    .iter()
                    .filter_map(|f| f.data_ref().map(|d| d.len() as u64))
                    .sum();
                match rest {
                    None => SizeHint::with_exact(buffered),
                    Some(b) => {
                        let inner = b.size_hint();
                        let mut hint = SizeHint::new();
                        hint.set_lower(inner.lower().saturating_add(buffered));
                        if let Some(upper) = inner.upper() {
                            hint.set_upper(upper.saturating_add(buffered));
                        }
                        hint
                    }
                }
            }
        }
    }
}

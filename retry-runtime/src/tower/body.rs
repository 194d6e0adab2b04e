//! Replayability from the body type.

use bytes::Bytes;

use crate::replay::Replayability;

/// A request body that may be produced again for another attempt.
///
/// Implemented for the in-memory bodies (`String`, `Vec<u8>`, `Bytes`, `()`, and
/// `http_body_util::{Full, Empty}`). Wrap any other body (a stream) in [`OneShot`]: it is sent
/// once and never retried.
pub trait ReplayBody: Sized {
    /// How replayable this body is.
    fn replayability(&self) -> Replayability;
    /// A fresh copy for another attempt, or `None` if the body cannot be replayed.
    fn replay(&self) -> Option<Self>;
}

macro_rules! clone_body {
    ($($t:ty),*) => {$(
        impl ReplayBody for $t {
            fn replayability(&self) -> Replayability {
                Replayability::Replayable
            }
            fn replay(&self) -> Option<Self> {
                Some(self.clone())
            }
        }
    )*};
}

clone_body!(
    String,
    Vec<u8>,
    Bytes,
    (),
    http_body_util::Full<Bytes>,
    http_body_util::Empty<Bytes>
);

/// A body that can be sent once only (a stream): the call is made, never retried.
#[derive(Debug)]
pub struct OneShot<B>(pub B);

impl<B> ReplayBody for OneShot<B> {
    fn replayability(&self) -> Replayability {
        Replayability::OneShot
    }
    fn replay(&self) -> Option<Self> {
        None
    }
}

impl<B: http_body::Body> http_body::Body for OneShot<B>
where
    B: Unpin,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.0).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.0.size_hint()
    }
}

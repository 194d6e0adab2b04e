//! The response body of a service behind the fault layer: the inner service's, or the empty
//! body of an injected status.

use std::pin::Pin;
use std::task::{Context, Poll};

use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

pin_project! {
    /// The inner service's body, or the empty body of an injected status.
    #[derive(Debug)]
    pub struct FaultBody<B> {
        #[pin]
        state: State<B>,
    }
}

pin_project! {
    #[project = StateProj]
    #[derive(Debug)]
    enum State<B> {
        Inner { #[pin] body: B },
        Injected,
    }
}

impl<B> FaultBody<B> {
    /// The inner service's body.
    pub const fn inner(body: B) -> Self {
        FaultBody {
            state: State::Inner { body },
        }
    }

    /// The empty body of an injected status.
    pub const fn injected() -> Self {
        FaultBody {
            state: State::Injected,
        }
    }

    /// Whether the fault layer answered.
    pub const fn is_injected(&self) -> bool {
        matches!(self.state, State::Injected)
    }
}

impl<B: Body> Body for FaultBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        match self.project().state.project() {
            StateProj::Inner { body } => body.poll_frame(cx),
            StateProj::Injected => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.state {
            State::Inner { body } => body.is_end_stream(),
            State::Injected => true,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.state {
            State::Inner { body } => body.size_hint(),
            State::Injected => SizeHint::with_exact(0),
        }
    }
}

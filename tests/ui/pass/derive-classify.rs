// `#[derive(Classify)]`: wrapping variants delegate every fact (and `from` converts with `?`),
// stating variants report their own; a struct may do either. Clean under `deny(warnings)`.
#![deny(warnings, unused_qualifications)]

use retry_runtime::{Classify, DenyReason, Evidence, PermanentCategory, Stop};

#[derive(Debug, Classify)]
enum AdapterError {
    #[classify(from)]
    Retry(retry_runtime::Error),
    #[classify(from)]
    Http(retry_runtime::http::HttpError),
    #[classify(evidence = "response_received", permanent = "contract")]
    Rejected { code: String },
    #[classify(permanent = "decode")]
    Garbled,
    Wrapped { inner: Inner },
    Kept(Keeps),
}

/// Keeps how the call ended, as the HTTP integration's error does.
#[derive(Debug, Default)]
struct Keeps(Option<Stop>);

impl Classify for Keeps {
    fn stopped(&mut self, stop: Stop) {
        self.0 = Some(stop);
    }
}

#[derive(Debug, Classify)]
#[classify(evidence = "not_sent")]
struct Inner;

#[derive(Debug, Classify)]
#[classify(transparent)]
struct Newtype(AdapterError);

#[derive(Debug, Classify)]
enum Generic<E: Classify> {
    Wraps(E),
}

fn main() {
    let e = AdapterError::from(retry_runtime::Error::CircuitOpen { upstream: "sber".into() });
    assert_eq!(e.evidence(), Evidence::NotSent);
    assert!(e.rejection().is_some(), "every fact delegated, not only the derived ones");
    let r = AdapterError::Rejected { code: "LIMIT".into() };
    assert_eq!((r.evidence(), r.permanent()), (Evidence::ResponseReceived, Some(PermanentCategory::Contract)));
    if let AdapterError::Rejected { code } = &r {
        assert_eq!(code, "LIMIT");
    }
    assert_eq!(AdapterError::Garbled.evidence(), Evidence::SentNoResponse, "the cautious default");
    let w = AdapterError::Wrapped { inner: Inner };
    assert_eq!(w.evidence(), Evidence::NotSent);
    assert_eq!(Newtype(AdapterError::Garbled).permanent(), Some(PermanentCategory::Decode));
    assert_eq!(Generic::Wraps(Inner).evidence(), Evidence::NotSent);
    // How the call ended reaches the wrapped error, through every layer of wrapping.
    let stop = Stop::new(3, DenyReason::MaxAttempts);
    let mut kept = Newtype(AdapterError::Kept(Keeps::default()));
    kept.stopped(stop);
    assert!(matches!(kept, Newtype(AdapterError::Kept(Keeps(Some(s)))) if s == stop));
    let mut stated = AdapterError::Garbled;
    stated.stopped(stop); // nowhere to keep it: forgotten, no panic
}

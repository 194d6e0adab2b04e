use super::*;

#[derive(Debug)]
struct KnowsNothing;
impl Classify for KnowsNothing {}

struct Wraps(crate::error::Error);
impl Classify for Wraps {
    fn via(&self) -> Option<&dyn Classify> {
        Some(&self.0)
    }
}

#[test]
fn an_error_that_proves_nothing_may_have_been_sent() {
    assert_eq!(KnowsNothing.evidence(), Evidence::SentNoResponse);
    assert_eq!(
        Failure::of(&KnowsNothing),
        Failure::new(Evidence::SentNoResponse)
    );
}

#[test]
fn every_fact_is_delegated_through_via() {
    let open = Wraps(crate::error::Error::CircuitOpen {
        upstream: "x".into(),
    });
    assert_eq!(open.evidence(), Evidence::NotSent);
    assert_eq!(open.rejection(), Some(Rejection::CircuitOpen));
    let key = Wraps(crate::error::Error::InvalidIdempotencyKey(
        crate::key::KeyError::Empty,
    ));
    assert_eq!(key.permanent(), Some(PermanentCategory::InvalidRequest));
    let boxed: Box<dyn Classify> = Box::new(open);
    assert_eq!(boxed.rejection(), Some(Rejection::CircuitOpen));
}

//! Compile-time behaviour of `#[retry]`: `ui/pass` must compile (and run), `ui/fail` must fail
//! with exactly the reviewed `.stderr`. Regenerate deliberately with `TRYBUILD=overwrite` and
//! read every diff: the messages are user-facing text.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("ui/pass/*.rs");
    t.compile_fail("ui/fail/*.rs");
}

// Generated code names nothing from the user's scope and trips no lint: user items named like
// prelude items or runtime items do not capture it, user locals named like generated ones do not
// collide, and the registration works under `forbid(unsafe_code)`.
#![forbid(unsafe_code)]
#![deny(unused_qualifications, unused, clippy::all)]

use retry_runtime::{Reconciled, Registry, retry};
use retry_tests::AdapterError;

#[allow(dead_code)]
struct Option;
#[allow(dead_code)]
struct Ok;
#[allow(dead_code)]
struct Err;
#[allow(dead_code)]
struct From;
#[allow(dead_code)]
mod core {}
#[allow(dead_code)]
struct Call;
#[allow(dead_code)]
struct CallSite;
#[allow(dead_code)]
struct Step;

#[retry(upstream = "hygiene", method = POST, idempotency = key, reconcile = check)]
async fn shadowing(key: &str, __retry_call: u32) -> Result<u32, AdapterError> {
    let __retry_attempt = __retry_call + 1;
    let __retry_result = __retry_attempt * 2;
    let __retry_self = "user";
    let _ = (__retry_self, key);
    Result::Ok(__retry_result)
}

async fn check(key: &str, n: u32) -> Reconciled<u32> {
    let _ = key;
    Reconciled::Happened(n)
}

fn main() {
    let _ = shadowing("key", 1);
    let _ = Registry::global();
}

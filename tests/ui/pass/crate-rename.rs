// `crate = "..."` when `retry-runtime` is known under another name.
extern crate retry_runtime as resilience;

use resilience::retry;
use retry_tests::AdapterError;

#[retry(upstream = "catalog", method = GET, crate = "resilience")]
pub async fn item(id: u32) -> Result<u32, AdapterError> {
    Ok(id)
}

fn main() {}

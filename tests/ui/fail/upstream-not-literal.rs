// The upstream is a string literal, so it can be registered and verified at start-up.
use retry_runtime::retry;
use retry_tests::AdapterError;

const SBER: &str = "sber";

#[retry(upstream = SBER, method = GET)]
async fn status() -> Result<u32, AdapterError> {
    Ok(1)
}

fn main() {}

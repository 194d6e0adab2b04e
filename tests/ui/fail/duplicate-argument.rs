// Each argument is given once.
use retry_runtime::retry;
use retry_tests::AdapterError;

#[retry(upstream = "sber", method = GET, upstream = "catalog", method = GET)]
async fn status() -> Result<u32, AdapterError> {
    Ok(1)
}

fn main() {}

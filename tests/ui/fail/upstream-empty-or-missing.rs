// The upstream names a registry entry: it cannot be empty or left out.
use retry_runtime::retry;
use retry_tests::AdapterError;

#[retry(upstream = "  ", method = GET)]
async fn empty() -> Result<u32, AdapterError> {
    Ok(1)
}

#[retry(method = GET)]
async fn missing() -> Result<u32, AdapterError> {
    Ok(1)
}

#[retry]
async fn bare() -> Result<u32, AdapterError> {
    Ok(1)
}

fn main() {}

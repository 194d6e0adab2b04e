// Attempts, backoff and timeouts belong in the upstream's registry entry.
use retry_runtime::retry;
use retry_tests::AdapterError;

#[retry(upstream = "sber", method = GET, max_attempts = 10, backoff = "linear", wait = 500, timeout = 2)]
async fn status() -> Result<u32, AdapterError> {
    Ok(1)
}

fn main() {}

// A literal key makes every call the same write.
use retry_runtime::retry;
use retry_tests::AdapterError;

#[retry(upstream = "sber", method = POST, idempotency = "register")]
async fn register(id: u64) -> Result<u64, AdapterError> {
    Ok(id)
}

fn main() {}

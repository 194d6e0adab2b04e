// A key must be text: a number (or any other type) is refused with what to use instead.
use retry_runtime::retry;
use retry_tests::AdapterError;

#[retry(upstream = "sber", method = POST, idempotency = order)]
async fn register(order: u64) -> Result<u64, AdapterError> {
    Ok(order)
}

fn main() {}

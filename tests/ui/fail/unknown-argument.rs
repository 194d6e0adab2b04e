// Unknown keys are listed with the valid ones; a near miss gets a suggestion.
use retry_runtime::retry;
use retry_tests::AdapterError;

#[retry(upstream = "sber", method = POST, idempotency_key = id.to_string(), colour = "blue", fallback(x))]
async fn register(id: u64) -> Result<u64, AdapterError> {
    Ok(id)
}

fn main() {}

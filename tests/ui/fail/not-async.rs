// The attempt loop awaits its backoff: only an `async fn` can hold it.
use retry_runtime::retry;
use retry_tests::AdapterError;

#[retry(upstream = "sber", method = GET)]
fn status() -> Result<u32, AdapterError> {
    Ok(1)
}

fn main() {
    let _ = status();
}

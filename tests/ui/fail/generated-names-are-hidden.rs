// The loop's locals are hygienic: the body cannot reach them.
use retry_runtime::retry;
use retry_tests::AdapterError;

#[retry(upstream = "sber", method = GET)]
async fn peek() -> Result<u32, AdapterError> {
    let attempts = __retry_call.attempts();
    Ok(attempts)
}

fn main() {}

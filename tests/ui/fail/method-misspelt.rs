// Methods are the bare, upper-case names of `http::Method`'s constants.
use retry_runtime::retry;
use retry_tests::AdapterError;

#[retry(upstream = "sber", method = "GET")]
async fn quoted() -> Result<u32, AdapterError> {
    Ok(1)
}

#[retry(upstream = "sber", method = get)]
async fn lower() -> Result<u32, AdapterError> {
    Ok(1)
}

#[retry(upstream = "sber", method = FETCH)]
async fn unknown() -> Result<u32, AdapterError> {
    Ok(1)
}

fn main() {}

// A by-value argument is given afresh to every attempt, so it must be `Clone`.
use retry_runtime::retry;
use retry_tests::AdapterError;

pub struct Upload {
    pub bytes: Vec<u8>,
}

#[retry(upstream = "storage", method = PUT, idempotency = key.as_str())]
async fn upload(key: &String, body: Upload) -> Result<usize, AdapterError> {
    Ok(body.bytes.len())
}

fn main() {}

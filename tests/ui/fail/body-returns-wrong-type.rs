// A body whose value does not match the signature: the error names the declared return type.
use retry_runtime::retry;
use retry_tests::AdapterError;

#[retry(upstream = "sber", method = GET)]
async fn status() -> Result<u32, AdapterError> {
    Ok("ready")
}

#[retry(upstream = "sber", method = GET)]
async fn name(id: u32) -> Result<String, AdapterError> {
    if id == 0 {
        return Ok(String::new());
    }
    format!("#{id}")
}

fn main() {}

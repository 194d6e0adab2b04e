// No `method = ...` and nothing in the body shows one: the macro never assumes GET.
use retry_runtime::retry;
use retry_tests::AdapterError;

pub struct Sber;
impl Sber {
    async fn call(&self, path: &str) -> Result<u32, AdapterError> {
        let _ = path;
        Ok(1)
    }
}

#[retry(upstream = "sber")]
async fn status(sber: &Sber) -> Result<u32, AdapterError> {
    sber.call("/status").await
}

fn main() {}

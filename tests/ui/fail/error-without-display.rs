// `Classify` does not write `Display`: an error type without it is reported once, at the type,
// with the fix.
use retry_runtime::{Classify, retry};

#[derive(Debug, Classify)]
pub enum AdapterError {
    #[classify(from)]
    Retry(retry_runtime::Error),
    #[classify(status = 422, permanent = "contract")]
    Rejected { code: String },
}

#[retry(upstream = "catalog", method = GET)]
async fn item(id: u32) -> Result<u32, AdapterError> {
    Ok(id)
}

fn main() {}

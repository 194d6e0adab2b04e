// PUT and DELETE are idempotent on paper, but only an upstream that deduplicates by key makes
// a retry after a lost response safe.
use retry_runtime::retry;
use retry_tests::AdapterError;

#[retry(upstream = "catalog", method = PUT)]
async fn set_price(id: u32, price: u64) -> Result<(), AdapterError> {
    let _ = (id, price);
    Ok(())
}

#[retry(upstream = "catalog", method = DELETE)]
async fn remove(id: u32) -> Result<(), AdapterError> {
    let _ = id;
    Ok(())
}

fn main() {}

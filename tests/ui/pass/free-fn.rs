// A free function: a read, retried when eligible.
use retry_runtime::retry;
use retry_tests::AdapterError;

#[retry(upstream = "catalog", method = GET)]
pub async fn order_status(id: &str) -> Result<String, AdapterError> {
    Ok(format!("status of {id}"))
}

fn assert_send<T: Send>(_: &T) {}

fn main() {
    let future = order_status("42");
    assert_send(&future);
}

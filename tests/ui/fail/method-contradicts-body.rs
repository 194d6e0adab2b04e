// The declared method decides the retry rules, so the body may not send a different write: a
// `.post()` under `method = GET` would be retried as a read. A key on a read is refused too.
use retry_runtime::http::RequestBuilderExt;
use retry_tests::AdapterError;

#[retry_runtime::retry(upstream = "sber", method = GET)]
async fn pay(client: &reqwest::Client) -> Result<reqwest::Response, AdapterError> {
    Ok(client.post("http://sber/pay").send_attempt().await?)
}

#[retry_runtime::retry(upstream = "sber", method = GET, idempotency = order.to_owned())]
async fn status(client: &reqwest::Client, order: &str) -> Result<reqwest::Response, AdapterError> {
    Ok(client.get("http://sber/status").send_attempt().await?)
}

#[retry_runtime::retry(upstream = "sber", method = PUT, idempotency = order.to_owned())]
async fn replace(client: &reqwest::Client, order: &str) -> Result<reqwest::Response, AdapterError> {
    Ok(client.delete("http://sber/order").send_attempt().await?)
}

fn main() {}

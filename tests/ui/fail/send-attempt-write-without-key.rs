// `send_attempt()` shows the method like `send()` does: an unkeyed POST is refused for what it
// is, a write without a key, not for a method the macro cannot see.
use retry_runtime::http::RequestBuilderExt;
use retry_tests::AdapterError;

#[retry_runtime::retry(upstream = "sber")]
async fn pay(client: &reqwest::Client) -> Result<reqwest::Response, AdapterError> {
    Ok(client.post("http://sber/pay").send_attempt().await?)
}

fn main() {}

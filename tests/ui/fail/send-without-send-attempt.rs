// `.send()` bypasses the classifying send path: the error it returns proves nothing about
// whether the request was sent, and `?` cannot convert it. The hint names `send_attempt()`.
use retry_runtime::retry;
use retry_tests::AdapterError;

#[retry(upstream = "catalog", method = GET)]
async fn item(client: &reqwest::Client) -> Result<u16, AdapterError> {
    let response = client.get("http://catalog/items/1").send().await?;
    Ok(response.status().as_u16())
}

fn main() {}

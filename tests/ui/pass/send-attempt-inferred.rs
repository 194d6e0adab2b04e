// The library's own send path is evidence of the method: `client.get(url)...send_attempt()` needs
// no `method = ...`. One-line bodies expand without lint noise (`unused_braces` and friends).
#![deny(warnings)]

use retry_runtime::http::{RequestBuilderExt, ResponseExt};
use retry_runtime::retry;
use retry_tests::AdapterError;

pub struct Catalog {
    client: reqwest::Client,
    base: String,
}

impl Catalog {
    #[retry(upstream = "catalog")]
    pub async fn item(&self, id: u64) -> Result<bytes::Bytes, AdapterError> {
        let response = self.client.get(format!("{}/items/{id}", self.base)).send_attempt().await?;
        Ok(response.read_bytes().await?)
    }

    #[retry(upstream = "catalog", method = GET)]
    pub async fn one_line(&self) -> Result<u32, AdapterError> { Ok(1) }

    // A request at least as safe as the declaration: a GET under POST is allowed.
    #[retry(upstream = "catalog", method = POST, idempotency = key.to_owned())]
    pub async fn read_under_write(&self, key: &str) -> Result<bytes::Bytes, AdapterError> {
        let response = self.client.get(self.base.as_str()).send_attempt().await?;
        Ok(response.read_bytes().await?)
    }
}

fn main() {
    let catalog = Catalog { client: reqwest::Client::new(), base: String::new() };
    let _ = (catalog.item(1), catalog.one_line(), catalog.read_under_write("k"));
}

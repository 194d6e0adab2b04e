//! The loopback HTTP contender as an application writes it: an adapter method under
//! `#[retry]`, sending through the classifying send path (propagation headers, evidence, the
//! body read inside the attempt).

use bytes::Bytes;
use retry_runtime::http::{RequestBuilderExt, ResponseExt};
use retry_runtime::{Error, Registry, retry};

/// A catalog client with one read.
pub struct Catalog<'r> {
    /// The HTTP client.
    pub client: reqwest::Client,
    /// The item's URL.
    pub url: String,
    /// The registry holding the `catalog` upstream.
    pub registry: &'r Registry,
}

impl Catalog<'_> {
    /// Reads the item: retried by the runtime when the evidence, budget and deadline allow.
    #[retry(upstream = "catalog", method = GET, registry = self.registry)]
    pub async fn item(&self) -> Result<Bytes, Error> {
        let response = self.client.get(&self.url).send_attempt().await?;
        Ok(response.read_bytes().await?)
    }
}

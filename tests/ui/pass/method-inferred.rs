// No `method = ...`: the method is read from a request builder chain that is sent, or from a
// `Method::X` constant, when the body shows exactly one. (A stand-in for reqwest's client: its
// `send()` is the classifying path here, so the hint toward `send_attempt()` is silenced.)
#![allow(deprecated)]
use retry_runtime::{Method, retry};
use retry_tests::AdapterError;

pub struct Client;
pub struct RequestBuilder;

impl Client {
    pub fn get(&self, _url: &str) -> RequestBuilder {
        RequestBuilder
    }
    pub fn request(&self, _method: Method, _url: &str) -> RequestBuilder {
        RequestBuilder
    }
}

impl RequestBuilder {
    pub fn header(self, _name: &str, _value: &str) -> Self {
        self
    }
    pub async fn send(self) -> Result<u32, AdapterError> {
        Ok(200)
    }
}

pub struct Catalog {
    http: Client,
}

impl Catalog {
    // A read: `.get(url)...send()`. The map lookup `.get(&id)` is not a request.
    #[retry(upstream = "catalog")]
    pub async fn item(&self, id: u32, cache: &std::collections::HashMap<u32, u32>) -> Result<u32, AdapterError> {
        if let Some(hit) = cache.get(&id) {
            return Ok(*hit);
        }
        self.http.get("https://catalog/items").header("accept", "json").send().await
    }

    // A keyed write: `.request(Method::PUT, url)...send()`.
    #[retry(upstream = "catalog", idempotency = format!("price-{id}"))]
    pub async fn set_price(&self, id: u32) -> Result<u32, AdapterError> {
        self.http.request(Method::PUT, "https://catalog/prices").send().await
    }
}

fn main() {}

// The body sends a request built elsewhere, or sends two methods: the method is not
// unmistakable, so it must be written.
use retry_runtime::{Method, retry};
use retry_tests::AdapterError;

pub struct Client;
pub struct Builder;
impl Client {
    pub fn get(&self, _url: &str) -> Builder {
        Builder
    }
    pub fn post(&self, _url: &str) -> Builder {
        Builder
    }
    pub fn request(&self, _method: Method, _url: &str) -> Builder {
        Builder
    }
}
impl Builder {
    pub async fn send(self) -> Result<u32, AdapterError> {
        Ok(200)
    }
}

#[retry(upstream = "sber")]
async fn prebuilt(http: &Client) -> Result<u32, AdapterError> {
    let request = http.post("https://sber/pay");
    request.send().await
}

#[retry(upstream = "sber")]
async fn dynamic(http: &Client, method: Method) -> Result<u32, AdapterError> {
    http.request(method, "https://sber/x").send().await
}

#[retry(upstream = "sber")]
async fn two_methods(http: &Client) -> Result<u32, AdapterError> {
    http.get("https://sber/status").send().await?;
    http.post("https://sber/pay").send().await
}

fn main() {}

// The body shows a POST, so the macro knows it is a write: it still needs a key or a check.
use retry_tests::AdapterError;

pub struct Client;
pub struct Builder;
impl Client {
    pub fn post(&self, _url: &str) -> Builder {
        Builder
    }
}
impl Builder {
    pub async fn send(self) -> Result<u32, AdapterError> {
        Ok(200)
    }
}

#[retry_runtime::retry(upstream = "sber")]
async fn register(http: &Client) -> Result<u32, AdapterError> {
    http.post("https://sber/register").send().await
}

fn main() {}

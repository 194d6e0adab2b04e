// `hedge` on reads and keyed writes: shared references are shared by the copies, by-value
// arguments (and a `Clone` receiver) are cloned for each copy.
use retry_runtime::retry;
use retry_tests::AdapterError;

#[derive(Clone)]
pub struct Client {
    base: String,
}

impl Client {
    #[retry(upstream = "catalog", method = GET, hedge)]
    pub async fn item(&self, id: &u64, mut note: String) -> Result<String, AdapterError> {
        note.push_str(&self.base);
        Ok(format!("{id}{note}"))
    }

    #[retry(upstream = "catalog", method = POST, idempotency = id.to_string(), hedge)]
    pub async fn register(self, id: u64) -> Result<String, AdapterError> {
        Ok(format!("{}{id}", self.base))
    }
}

#[retry(upstream = "catalog", method = GET, hedge)]
async fn pair((a, b): (u32, String)) -> Result<String, AdapterError> {
    Ok(format!("{a}{b}"))
}

fn main() {
    let client = Client { base: String::new() };
    let _ = client.item(&1, String::new());
    let _ = client.clone().register(2);
    let _ = pair((1, String::new()));
}

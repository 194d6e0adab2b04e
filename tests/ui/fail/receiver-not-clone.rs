// `self` by value is consumed by the first attempt: the loop needs a clone for each one.
use retry_runtime::retry;
use retry_tests::AdapterError;

pub struct Connection {
    pub id: u32,
}

impl Connection {
    #[retry(upstream = "sber", method = GET)]
    pub async fn close(self) -> Result<u32, AdapterError> {
        Ok(self.id)
    }
}

fn main() {}

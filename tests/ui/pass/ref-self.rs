// `&self`: the body borrows `self` afresh on every attempt.
use retry_runtime::retry;
use retry_tests::AdapterError;

pub struct Sber {
    base: String,
}

impl Sber {
    #[retry(upstream = "sber", method = GET)]
    pub async fn order_status(&self, id: &str) -> Result<String, AdapterError> {
        Ok(format!("{}/orders/{id}", self.base))
    }
}

fn assert_send<T: Send>(_: &T) {}

fn main() {
    let sber = Sber { base: "https://sber".into() };
    assert_send(&sber.order_status("1"));
}

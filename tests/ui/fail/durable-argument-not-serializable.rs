// Every argument of a durable function but `&self` is written to the queue with the call: one
// that is not serializable is named where it is declared, once per missing serde trait only.
use retry_runtime::durable::Durable;
use retry_runtime::retry;
use retry_tests::AdapterError;

#[derive(Clone)]
pub struct Receipt {
    pub id: u64,
}

pub struct Adapter;

impl Adapter {
    #[retry(upstream = "sber", method = GET, durable = "sber.receipt")]
    async fn receipt(&self, id: u64, previous: &Receipt) -> Result<Durable<u64>, AdapterError> {
        Ok(id + previous.id)
    }
}

fn main() {}

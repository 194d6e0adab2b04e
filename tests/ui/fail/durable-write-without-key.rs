// A durable POST without a key: a worker replays it later, again after a crash mid-replay,
// and only a key the upstream deduplicates makes each replay the same write. A reconcile check
// does not make it durable (it runs only inside one call).
use retry_runtime::durable::Durable;
use retry_runtime::retry;
use retry_tests::AdapterError;

pub struct Adapter;

impl Adapter {
    #[retry(upstream = "sber", method = POST, durable = "sber.pay")]
    async fn pay(&self, amount: u64) -> Result<Durable<u64>, AdapterError> {
        Ok(amount)
    }

    #[retry(upstream = "sber", method = POST, reconcile = Self::find, durable = "sber.pay2")]
    async fn pay2(&self, amount: u64) -> Result<Durable<u64>, AdapterError> {
        Ok(amount)
    }

    async fn find(&self, _amount: u64) -> retry_runtime::Reconciled<Durable<u64>> {
        retry_runtime::Reconciled::Unknown
    }
}

fn main() {}

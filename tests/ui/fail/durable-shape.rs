// What a durable function must be: a method on `&self` (the worker replays it on the adapter
// it is handed), not generic, no `&mut` argument, a named operation, returning
// `Result<Durable<T>, E>`.
use retry_runtime::durable::Durable;
use retry_runtime::retry;
use retry_tests::AdapterError;

#[retry(upstream = "sber", method = GET, durable = "sber.free")]
async fn free(id: u64) -> Result<Durable<u64>, AdapterError> {
    Ok(id)
}

pub struct Adapter;

impl Adapter {
    #[retry(upstream = "sber", method = GET, durable = "sber.mut")]
    async fn by_mut(&mut self, id: u64) -> Result<Durable<u64>, AdapterError> {
        Ok(id)
    }

    #[retry(upstream = "sber", method = GET, durable = "sber.generic")]
    async fn generic<T: Clone>(&self, id: T, out: &mut Vec<u8>) -> Result<Durable<u64>, AdapterError> {
        let _ = (id, out);
        Ok(1)
    }

    #[retry(upstream = "sber", method = GET, durable = "")]
    async fn unnamed(&self, id: u64) -> Result<Durable<u64>, AdapterError> {
        Ok(id)
    }

    #[retry(upstream = "sber", method = GET, durable = "sber.plain")]
    async fn plain(&self, id: u64) -> Result<u64, AdapterError> {
        Ok(id)
    }
}

fn main() {}

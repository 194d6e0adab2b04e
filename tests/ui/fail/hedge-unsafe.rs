// `hedge` runs the body as several copies at once: refused for a write without a key (both
// copies could execute it), for a body holding a `&mut` borrow (it cannot be shared between
// copies), and with a value (when to hedge belongs in the registry).
use retry_runtime::{Reconciled, retry};
use retry_tests::AdapterError;

pub struct PayCommand;

pub struct Client;

impl Client {
    #[retry(upstream = "sber", method = POST, reconcile = Self::find, hedge)]
    async fn pay(&self, cmd: &PayCommand) -> Result<u64, AdapterError> {
        let _ = cmd;
        Ok(1)
    }

    async fn find(&self, cmd: &PayCommand) -> Reconciled<u64> {
        let _ = cmd;
        Reconciled::Unknown
    }

    #[retry(upstream = "catalog", method = GET, hedge)]
    async fn next(&mut self, buffer: &mut Vec<u8>) -> Result<usize, AdapterError> {
        Ok(buffer.len())
    }
}

#[retry(upstream = "catalog", method = GET, hedge = "50ms")]
async fn item(id: u64) -> Result<u64, AdapterError> {
    Ok(id)
}

fn main() {
    let _ = item(1);
}

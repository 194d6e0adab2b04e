// A method of a trait implementation (native `async fn` in traits).
use retry_runtime::retry;
use retry_tests::AdapterError;

pub struct Cmd {
    pub order: u64,
}

impl Cmd {
    pub fn idempotency_key(&self) -> String {
        format!("register-{}", self.order)
    }
}

#[allow(async_fn_in_trait)]
pub trait PaymentGateway {
    async fn register(&self, cmd: &Cmd) -> Result<u64, AdapterError>;
    async fn status(&mut self, order: u64) -> Result<String, AdapterError>;
}

pub struct Sber;

impl PaymentGateway for Sber {
    #[retry(upstream = "sber", method = POST, idempotency = cmd.idempotency_key())]
    async fn register(&self, cmd: &Cmd) -> Result<u64, AdapterError> {
        Ok(cmd.order)
    }

    #[retry(upstream = "sber", method = GET)]
    async fn status(&mut self, order: u64) -> Result<String, AdapterError> {
        Ok(format!("{order}"))
    }
}

fn main() {
    let _ = Sber.register(&Cmd { order: 1 });
}

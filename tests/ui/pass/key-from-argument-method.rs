// The key is any expression over the arguments, evaluated once before the first attempt:
// here an argument's method, a field, and `self`.
use retry_runtime::{IdempotencyKey, retry};
use retry_tests::AdapterError;

pub struct RegisterCommand {
    pub order: u64,
    pub key: IdempotencyKey,
}

impl RegisterCommand {
    pub fn idempotency_key(&self) -> String {
        format!("register-{}", self.order)
    }
}

pub struct Sber {
    prefix: String,
}

impl Sber {
    #[retry(upstream = "sber", method = POST, idempotency = cmd.idempotency_key())]
    pub async fn register(&self, cmd: &RegisterCommand) -> Result<u64, AdapterError> {
        Ok(cmd.order)
    }

    #[retry(upstream = "sber", method = PATCH, idempotency = cmd.key.clone())]
    pub async fn amend(&self, cmd: &RegisterCommand) -> Result<u64, AdapterError> {
        Ok(cmd.order)
    }

    #[retry(upstream = "sber", method = DELETE, idempotency = format!("{}-{order}", self.prefix))]
    pub async fn cancel(&self, order: u64) -> Result<(), AdapterError> {
        let _ = order;
        Ok(())
    }
}

fn main() {}

// A POST without a key or a check: retrying it after a lost response can pay twice. The function
// is still emitted, so its caller compiles without further errors.
use retry_runtime::retry;
use retry_tests::AdapterError;

pub struct PayCommand;

#[retry(upstream = "sber", method = POST)]
async fn pay(cmd: &PayCommand) -> Result<u64, AdapterError> {
    let _ = cmd;
    Ok(1)
}

#[retry(upstream = "sber", method = PATCH)]
async fn amend(cmd: &PayCommand) -> Result<u64, AdapterError> {
    let _ = cmd;
    Ok(1)
}

async fn caller() -> Result<u64, AdapterError> {
    pay(&PayCommand).await
}

fn main() {
    let _ = caller();
    let _ = amend(&PayCommand);
}

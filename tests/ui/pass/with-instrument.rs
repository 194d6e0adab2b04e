// `#[tracing::instrument]` in both orders: outside `#[retry]` (one span per attempt) and inside
// it (one span around the whole call).
use retry_runtime::retry;
use retry_tests::AdapterError;

#[derive(Debug)]
pub struct Sber {
    calls: u32,
}

#[derive(Debug, Clone)]
pub struct Cmd {
    pub id: u64,
}

impl Sber {
    #[tracing::instrument]
    #[retry(upstream = "sber", method = GET)]
    pub async fn instrument_outside(&mut self, cmd: Cmd) -> Result<u64, AdapterError> {
        self.calls += 1;
        Ok(cmd.id)
    }

    #[retry(upstream = "sber", method = GET)]
    #[tracing::instrument(skip(self), err)]
    pub async fn instrument_inside(&mut self, cmd: &Cmd) -> Result<u64, AdapterError> {
        self.calls += 1;
        Ok(cmd.id)
    }
}

#[tracing::instrument(ret)]
#[retry(upstream = "sber", method = POST, idempotency = cmd.id.to_string())]
pub async fn free_outside(cmd: &Cmd) -> Result<u64, AdapterError> {
    Ok(cmd.id)
}

#[retry(upstream = "sber", method = POST, idempotency = cmd.id.to_string())]
#[tracing::instrument(level = "debug")]
pub async fn free_inside(cmd: &Cmd) -> Result<u64, AdapterError> {
    Ok(cmd.id)
}

fn main() {
    let mut s = Sber { calls: 0 };
    let _ = s.instrument_outside(Cmd { id: 1 });
}

// Durable reads and keyed writes compile, with arguments by reference and by value, and each
// gets its replay handler beside it.
use std::sync::Arc;

use retry_runtime::durable::{Durable, Replay};
use retry_runtime::retry;
use retry_tests::AdapterError;
use serde::{Deserialize, Serialize};

#[derive(Clone, Serialize, Deserialize)]
pub struct Register {
    pub id: u64,
}

impl Register {
    fn key(&self) -> String {
        format!("register-{}", self.id)
    }
}

pub struct Adapter;

impl Adapter {
    #[retry(upstream = "sber", method = POST, idempotency = cmd.key(), durable = "sber.register")]
    pub async fn register(&self, cmd: &Register, note: String, tag: &str) -> Result<Durable<u64>, AdapterError> {
        Ok(cmd.id + note.len() as u64 + tag.len() as u64)
    }

    #[retry(upstream = "sber", method = GET, durable = "sber.status")]
    async fn status(&self) -> Result<Durable<String>, AdapterError> {
        Ok(String::new())
    }
}

fn main() {
    let adapter = Arc::new(Adapter);
    let replays: [Replay; 2] = [
        Adapter::register_replay(adapter.clone()),
        Adapter::status_replay(adapter.clone()),
    ];
    assert_eq!(replays[0].operation(), "sber.register");
    assert_eq!(replays[1].operation(), "sber.status");
    let _ = adapter.status();
}

//! `#[retry(hedge)]` at runtime, on tokio's paused clock: the body runs as two copies at once,
//! each inside its own attempt with its own clone of the by-value arguments, the first answer
//! wins and the other copy is dropped.
#![deny(unused_qualifications)]

use std::sync::Mutex;
use std::time::Duration;

use retry_runtime::hedge::HedgeConfig;
use retry_runtime::{Attempt, Registry, UpstreamConfig, retry};
use retry_tests::AdapterError;
use tokio::time::Instant;

/// Attempt latencies by attempt number, and what each copy saw.
struct Catalog {
    registry: Registry,
    latencies: Vec<u64>,
    seen: Mutex<Vec<(u32, String, Option<String>)>>,
}

impl Catalog {
    fn new(latencies: Vec<u64>, hedge: HedgeConfig) -> Self {
        let config = UpstreamConfig::new()
            .with_breaker(None)
            .with_throttle(None)
            .with_hedge(Some(hedge));
        Catalog {
            registry: Registry::builder()
                .upstream("macro-hedge", config)
                .build()
                .unwrap(),
            latencies,
            seen: Mutex::default(),
        }
    }

    #[retry(upstream = "macro-hedge", method = GET, registry = &self.registry, hedge)]
    async fn item(&self, id: &u64, mut note: String) -> Result<String, AdapterError> {
        let attempt = Attempt::current().expect("inside an attempt");
        let n = attempt.number();
        note.push_str(&n.to_string());
        let key = attempt.idempotency_key().map(|k| k.as_str().to_owned());
        self.seen.lock().unwrap().push((n, note.clone(), key));
        tokio::time::sleep(Duration::from_millis(self.latencies[n as usize - 1])).await;
        assert_eq!(Attempt::current().map(|a| a.number()), Some(n));
        Ok(format!("{id}:{note}"))
    }

    #[retry(
        upstream = "macro-hedge",
        method = POST,
        idempotency = format!("order-{id}"),
        registry = &self.registry,
        hedge
    )]
    async fn register(&self, id: u64) -> Result<u32, AdapterError> {
        let attempt = Attempt::current().expect("inside an attempt");
        let n = attempt.number();
        let key = attempt.idempotency_key().map(|k| k.as_str().to_owned());
        self.seen.lock().unwrap().push((n, id.to_string(), key));
        tokio::time::sleep(Duration::from_millis(self.latencies[n as usize - 1])).await;
        Ok(n)
    }
}

#[tokio::test(start_paused = true)]
async fn a_hedged_read_takes_the_first_answer_and_each_copy_has_its_own_arguments() {
    let catalog = Catalog::new(
        vec![1000, 10],
        HedgeConfig::after(Duration::from_millis(50)),
    );
    let start = Instant::now();
    let item = catalog.item(&7, "note-".to_owned()).await.unwrap();
    assert_eq!(
        item, "7:note-2",
        "the hedge answered first, with its own clone"
    );
    assert_eq!(start.elapsed(), Duration::from_millis(60));
    let seen = catalog.seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        [
            (1, "note-1".to_owned(), None),
            (2, "note-2".to_owned(), None)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_keyed_write_is_hedged_with_the_same_key_only_when_the_upstream_dedups_copies() {
    let catalog = Catalog::new(
        vec![1000, 10],
        HedgeConfig::after(Duration::from_millis(50)),
    );
    assert_eq!(
        catalog.register(9).await.unwrap(),
        1,
        "no promise: no hedge"
    );

    let dedups = HedgeConfig::after(Duration::from_millis(50)).with_dedups_in_flight(true);
    let catalog = Catalog::new(vec![1000, 10], dedups);
    assert_eq!(catalog.register(9).await.unwrap(), 2);
    let keys: Vec<_> = catalog
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.2.clone())
        .collect();
    assert_eq!(
        keys,
        [Some("order-9".to_owned()), Some("order-9".to_owned())]
    );
}

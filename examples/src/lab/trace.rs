//! `--trace DIR`: every operation and every catalog request of a run, one line each, to find
//! which calls went when after a property failed (a burst after a fault: were they retries,
//! calls a throttle held, or a caller above retrying?).
//!
//! Two tab-separated files per run, named `{scenario}-{design}-{seed}`:
//!
//! - `.operations.tsv`: `id start_s latency_s outcome catalog_calls lag_s`, one line per
//!   operation (its id is the order id), times from the start of the measured load;
//! - `.catalog.tsv`: `arrived_s ended_s order nth status`, one line per request the catalog
//!   received (the warm-up's with negative times), `nth` counting from 0 per order in arrival
//!   order, `status` `-` when the client left before the answer.
//!
//! An operation that started long before its catalog request (`arrived_s - start_s`) was held
//! on the way; `nth > 0` is a second request for the same order (a retry, a hedge, or a
//! caller above retrying the chain).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};

use super::catalog::{CatalogCounts, CatalogRequest};
use super::load::OpRecord;
use super::metrics::Run;

/// Writes `run`'s two files into `dir` (made if missing); returns their paths.
pub fn write(
    dir: &Path,
    run: &Run,
    records: &[OpRecord],
    counts: &CatalogCounts,
) -> io::Result<[PathBuf; 2]> {
    std::fs::create_dir_all(dir)?;
    let stem = format!("{}-{}-{}", run.scenario.name(), run.design, run.seed);
    let operations = dir.join(format!("{stem}.operations.tsv"));
    let catalog = dir.join(format!("{stem}.catalog.tsv"));
    std::fs::write(&operations, operations_tsv(records, counts))?;
    std::fs::write(&catalog, catalog_tsv(&counts.requests))?;
    Ok([operations, catalog])
}

fn operations_tsv(records: &[OpRecord], counts: &CatalogCounts) -> String {
    let mut text = String::from("id\tstart_s\tlatency_s\toutcome\tcatalog_calls\tlag_s\n");
    for r in records {
        let calls = counts.calls.get(&r.id).copied().unwrap_or(0);
        let _ = writeln!(
            text,
            "{}\t{:.3}\t{:.3}\t{:?}\t{calls}\t{:.3}",
            r.id,
            r.start.as_secs_f64(),
            r.latency.as_secs_f64(),
            r.outcome,
            r.lag.as_secs_f64()
        );
    }
    text
}

fn catalog_tsv(requests: &[CatalogRequest]) -> String {
    let mut by_arrival: Vec<&CatalogRequest> = requests.iter().collect();
    by_arrival.sort_by(|a, b| a.arrived.total_cmp(&b.arrived));
    let mut nth = HashMap::<u64, u32>::new();
    let mut text = String::from("arrived_s\tended_s\torder\tnth\tstatus\n");
    for a in by_arrival {
        let (order, n) = match a.order {
            Some(order) => {
                let n = nth.entry(order).or_default();
                *n += 1;
                (order.to_string(), (*n - 1).to_string())
            }
            None => ("-".to_owned(), "-".to_owned()),
        };
        let status = a.status.map_or_else(|| "-".to_owned(), |s| s.to_string());
        let _ = writeln!(
            text,
            "{:.3}\t{:.3}\t{order}\t{n}\t{status}",
            a.arrived, a.ended
        );
    }
    text
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::lab::designs::Design;
    use crate::lab::load::Outcome;
    use crate::lab::scenarios::Scenario;

    fn request(arrived: f64, order: Option<u64>, status: Option<u16>) -> CatalogRequest {
        CatalogRequest {
            arrived,
            ended: arrived + 0.01,
            order,
            status,
        }
    }

    #[test]
    fn requests_are_listed_by_arrival_and_counted_per_order() {
        // Ended out of order: the second request for order 7 ended first.
        let requests = [
            request(0.5, Some(7), Some(503)),
            request(0.2, Some(7), None),
            request(0.3, None, Some(404)),
            request(-1.0, Some(3), Some(200)),
        ];
        assert_eq!(
            catalog_tsv(&requests),
            "arrived_s\tended_s\torder\tnth\tstatus\n\
             -1.000\t-0.990\t3\t0\t200\n\
             0.200\t0.210\t7\t0\t-\n\
             0.300\t0.310\t-\t-\t404\n\
             0.500\t0.510\t7\t1\t503\n"
        );
    }

    #[test]
    fn a_run_writes_one_file_of_operations_and_one_of_requests() {
        let dir = std::env::temp_dir().join(format!("lab-trace-{}", std::process::id()));
        let run = Run {
            scenario: Scenario::Transient,
            design: Design::B,
            seed: 9,
            duration: Duration::from_secs(4),
        };
        let records = [OpRecord {
            id: 7,
            start: Duration::from_millis(200),
            latency: Duration::from_millis(350),
            outcome: Outcome::Ok,
            lag: Duration::ZERO,
        }];
        let counts = CatalogCounts {
            calls: HashMap::from([(7, 2)]),
            requests: vec![
                request(0.2, Some(7), Some(503)),
                request(0.5, Some(7), Some(200)),
            ],
            ..CatalogCounts::default()
        };
        let [operations, catalog] = write(&dir, &run, &records, &counts).unwrap();
        assert!(operations.ends_with("transient-outage-B-9.operations.tsv"));
        assert_eq!(
            std::fs::read_to_string(&operations).unwrap(),
            "id\tstart_s\tlatency_s\toutcome\tcatalog_calls\tlag_s\n7\t0.200\t0.350\tOk\t2\t0.000\n"
        );
        let lines = std::fs::read_to_string(&catalog).unwrap();
        assert_eq!(lines.lines().count(), 3, "{lines}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

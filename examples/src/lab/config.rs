//! The upstream configuration of the library's designs. B-tuned reads `examples/lab.toml`
//! through the registry's TOML loader (with the usual `RETRY__<UPSTREAM>__<KEY>` environment
//! overrides), exactly as a service reads its own file at start-up. B is what a user starts
//! from: [`DEFAULTS_TOML`], every key at its library default but the catalog's attempt timeout.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use retry_runtime::registry::{ConfigErrors, parse_toml};
use retry_runtime::{Registry, UpstreamConfig};

use super::designs::{Design, Registries};

fn defaults() -> Vec<(String, UpstreamConfig)> {
    parse_toml(DEFAULTS_TOML, "defaults.toml", []).expect("the defaults are valid")
}

/// The lab's configuration file in the repository.
pub fn default_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("lab.toml")
}

/// The same file, built into the binary: used when the repository's copy is not there (a
/// binary run from elsewhere).
pub const LAB_TOML: &str = include_str!("../../lab.toml");

/// Design B's upstreams: the library's defaults, but for the catalog's attempt timeout, which
/// is the same 300 ms in every design (the slow-catalog scenario is defined by it), and the
/// propagation headers, which the library's docs say to turn on for one's own services behind
/// the server layer (the middle and the catalog are). The API -> middle hop keeps the default
/// attempt timeout of a hop that propagates: half its 5 s deadline.
pub const DEFAULTS_TOML: &str = "\
[upstreams.middle]
propagate = true

[upstreams.catalog]
attempt_timeout = \"300ms\"
propagate = true
";

/// What B-hedged adds to B-tuned's catalog: a hedge once a call has run longer than 95 % of the
/// catalog's recent calls ("The Tail at Scale" defers hedges until the 95th-percentile
/// latency), for reads and keyed writes: the lab's catalog executes a key once however many
/// copies arrive at the same time (it looks the key up and records it under one lock).
pub const HEDGE_TOML: &str = "\
[upstreams.catalog.hedge]
percentile = 95
max_copies = 2
dedups_in_flight = true
";

/// `configs` with the catalog hedged as [`HEDGE_TOML`] says.
fn hedged(configs: &[(String, UpstreamConfig)]) -> Vec<(String, UpstreamConfig)> {
    let hedge = parse_toml(HEDGE_TOML, "hedge.toml", [])
        .expect("the hedge settings are valid")
        .into_iter()
        .find_map(|(name, c)| (name == "catalog").then_some(c.hedge))
        .flatten();
    configs
        .iter()
        .cloned()
        .map(|(name, c)| match name.as_str() {
            "catalog" => (name, c.with_hedge(hedge)),
            _ => (name, c),
        })
        .collect()
}

/// The parsed upstreams of the library's designs.
#[derive(Debug, Clone)]
pub struct LabUpstreams {
    /// Where B-tuned's were read from.
    pub source: PathBuf,
    configs: Vec<(String, UpstreamConfig)>,
    defaults: Vec<(String, UpstreamConfig)>,
    hedged: Vec<(String, UpstreamConfig)>,
}

impl LabUpstreams {
    /// Reads and validates `path` (every mistake at once, located), with the process's
    /// `RETRY__*` overrides applied on top. The repository's default path falls back to the
    /// built-in copy when the file is absent.
    pub fn load(path: &Path) -> Result<Self, ConfigErrors> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(_) if path == default_path() => LAB_TOML.to_owned(),
            Err(e) => {
                return Err(ConfigErrors(vec![
                    retry_runtime::registry::ConfigError::new(
                        "",
                        "",
                        format!("cannot read the lab configuration: {e}: check --config"),
                    )
                    .at(retry_runtime::registry::Location::whole(path)),
                ]));
            }
        };
        let env = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)));
        let configs = parse_toml(&text, path, env)?;
        Ok(LabUpstreams {
            source: path.to_owned(),
            hedged: hedged(&configs),
            configs,
            defaults: defaults(),
        })
    }

    /// The built-in copy of `examples/lab.toml`, without environment overrides (tests).
    pub fn builtin() -> Self {
        let configs = parse_toml(LAB_TOML, default_path(), []).expect("lab.toml is valid");
        LabUpstreams {
            source: default_path(),
            hedged: hedged(&configs),
            configs,
            defaults: defaults(),
        }
    }

    /// One upstream's config under `design` (B: the defaults; B-hedged: B-tuned's file and
    /// [`HEDGE_TOML`]; otherwise B-tuned's file).
    pub fn get(&self, design: Design, name: &str) -> Option<&UpstreamConfig> {
        self.of(design)
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, c)| c)
    }

    fn of(&self, design: Design) -> &[(String, UpstreamConfig)] {
        match design {
            Design::B => &self.defaults,
            Design::BHedged => &self.hedged,
            _ => &self.configs,
        }
    }

    /// Fresh registries for one run of `design` (budgets, breakers and bulkheads start empty),
    /// their jitter seeded from `seed`. A and C do not use them.
    pub fn registries(&self, design: Design, seed: u64) -> Registries {
        let configs = self.of(design);
        let build = |seed: u64| {
            Arc::new(
                Registry::builder()
                    .upstreams(configs.iter().cloned())
                    .seed(seed)
                    .build()
                    .expect("validated when loaded"),
            )
        };
        Registries {
            api: build(seed),
            middle: build(seed ^ 0x5eed_5eed),
            middle_replicas: Vec::new(),
        }
    }

    /// [`registries`](Self::registries) with the middle as `replicas` replicas, each with a
    /// registry of its own (`middle` is the first).
    pub fn fleet(&self, design: Design, seed: u64, replicas: usize) -> Registries {
        let mut registries = self.registries(design, seed);
        registries.middle_replicas = (1..replicas as u64)
            .map(|k| self.registries(design, seed.wrapping_add(k)).middle)
            .collect();
        registries
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_file_is_valid_and_says_what_the_lab_assumes() {
        let lab = LabUpstreams::builtin();
        let catalog = lab.get(Design::BTuned, "catalog").unwrap();
        assert_eq!(catalog.max_attempts, 3);
        assert_eq!(catalog.bulkhead, Some(32));
        // The library's admission control and budget: nothing tuned there.
        for name in ["catalog", "middle"] {
            let tuned = lab.get(Design::BTuned, name).unwrap();
            assert_eq!(tuned.budget, UpstreamConfig::new().budget);
            assert_eq!(tuned.throttle, UpstreamConfig::new().throttle);
            assert_eq!(tuned.breaker, UpstreamConfig::new().breaker);
        }
        assert_eq!(catalog.hedge, None, "B-tuned does not hedge");
        let hedged = lab.get(Design::BHedged, "catalog").unwrap();
        assert_eq!(
            hedged,
            &catalog.clone().with_hedge(Some(
                retry_runtime::hedge::HedgeConfig::at_percentile(95.0).with_dedups_in_flight(true)
            ))
        );
        assert_eq!(lab.get(Design::BHedged, "middle").unwrap().hedge, None);
    }

    #[test]
    fn design_b_runs_the_library_defaults_but_for_the_catalog_timeout() {
        let lab = LabUpstreams::builtin();
        let mut expected = UpstreamConfig::new().with_propagate(true);
        assert_eq!(lab.get(Design::B, "middle"), Some(&expected));
        expected.attempt_timeout = Some(std::time::Duration::from_millis(300));
        assert_eq!(lab.get(Design::B, "catalog"), Some(&expected));
    }
}

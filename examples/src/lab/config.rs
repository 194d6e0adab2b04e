//! Design B's upstream configuration: `examples/lab.toml`, read through the registry's TOML
//! loader (with the usual `RETRY__<UPSTREAM>__<KEY>` environment overrides), exactly as a
//! service reads its own file at start-up.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use retry_runtime::registry::{ConfigErrors, parse_toml};
use retry_runtime::{Registry, UpstreamConfig};

use super::designs::Registries;

/// The lab's configuration file in the repository.
pub fn default_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("lab.toml")
}

/// The same file, built into the binary: used when the repository's copy is not there (a
/// binary run from elsewhere).
pub const LAB_TOML: &str = include_str!("../../lab.toml");

/// The parsed upstreams of a lab configuration file.
#[derive(Debug, Clone)]
pub struct LabUpstreams {
    /// Where they were read from.
    pub source: PathBuf,
    configs: Vec<(String, UpstreamConfig)>,
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
        Ok(LabUpstreams {
            source: path.to_owned(),
            configs: parse_toml(&text, path, env)?,
        })
    }

    /// The built-in copy of `examples/lab.toml`, without environment overrides (tests).
    pub fn builtin() -> Self {
        LabUpstreams {
            source: default_path(),
            configs: parse_toml(LAB_TOML, default_path(), []).expect("lab.toml is valid"),
        }
    }

    /// One upstream's config.
    pub fn get(&self, name: &str) -> Option<&UpstreamConfig> {
        self.configs.iter().find(|(n, _)| n == name).map(|(_, c)| c)
    }

    /// Fresh registries for one run (budgets, breakers and bulkheads start empty), their jitter
    /// seeded from `seed`.
    pub fn registries(&self, seed: u64) -> Registries {
        let build = |seed: u64| {
            Arc::new(
                Registry::builder()
                    .upstreams(self.configs.iter().cloned())
                    .seed(seed)
                    .build()
                    .expect("validated when loaded"),
            )
        };
        Registries {
            api: build(seed),
            middle: build(seed ^ 0x5eed_5eed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_file_is_valid_and_says_what_the_lab_assumes() {
        let lab = LabUpstreams::builtin();
        let catalog = lab.get("catalog").unwrap();
        assert_eq!(catalog.max_attempts, 3);
        assert_eq!(catalog.bulkhead, Some(32));
        assert!(catalog.breaker.is_some());
        assert!(lab.get("middle").is_some());
    }
}

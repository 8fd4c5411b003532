//! What the subcommands share: where the configuration comes from, the exit codes, and
//! byte-size parsing and printing. `cli` and `bench` both depend on this module and never on
//! each other's internals (`cli` calls into `bench`, never the reverse).

use std::path::PathBuf;

use clap::Args;
use kvtier::config::{ConfigError, ConfigSources, TierConfig};

/// Exit code for success.
pub const EXIT_OK: i32 = 0;
/// Exit code for a runtime failure.
pub const EXIT_FAILURE: i32 = 1;
/// Exit code for a configuration or usage error.
pub const EXIT_CONFIG: i32 = 2;

/// Where the configuration comes from (shared by every subcommand).
#[derive(Debug, Clone, Args)]
pub struct ConfigArgs {
    /// TOML configuration file (default: ./kvtier.toml when present).
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// An adapter as LMCache JSON, e.g. '{"type": "fs", "base_path": "/data/kv"}'. Repeatable;
    /// replaces the adapters of the file and environment.
    #[arg(long = "l2-adapter", value_name = "JSON")]
    pub l2_adapter: Vec<String>,
    /// An LMCache YAML configuration (`remote_url: "s3://…"` with `extra_config`), read as one
    /// `s3` adapter after the file's adapters; LMCache's engine fields are accepted and ignored.
    #[arg(long = "lmcache-config", value_name = "FILE.yaml")]
    pub lmcache_config: Option<PathBuf>,
}

impl ConfigArgs {
    /// Loads the layered configuration these arguments describe.
    pub fn load(&self) -> Result<TierConfig, ConfigError> {
        self.load_with_notes().map(|(config, _)| config)
    }

    /// Loads the configuration, with the notes on what it accepted without using.
    pub fn load_with_notes(&self) -> Result<(TierConfig, Vec<String>), ConfigError> {
        TierConfig::load_with_notes(&{
            let mut built = ConfigSources::default();
            built.file = self.config.clone();
            built.search_dir = std::env::current_dir().ok();
            built.env = None;
            built.cli_adapters = self.l2_adapter.clone();
            built.lmcache_config = self.lmcache_config.clone();
            built
        })
    }
}

/// Parses `4MiB`, `256K`, `1g`, `65536` (binary multiples).
pub fn parse_size(s: &str) -> Option<usize> {
    // bytesize parses the number and the unit; kvtier reads K, KB, M, MB, G, GB and T, TB as
    // binary multiples (`4MB` = 4 MiB, as chunk sizes are meant), where bytesize reads them as
    // decimal, so those are spelled as their binary units first.
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let unit = match unit.trim().to_ascii_lowercase().as_str() {
        "k" | "kb" => "KiB",
        "m" | "mb" => "MiB",
        "g" | "gb" => "GiB",
        "t" | "tb" => "TiB",
        _ => unit.trim(),
    };
    let bytes: bytesize::ByteSize = format!("{num}{unit}").parse().ok()?;
    usize::try_from(bytes.as_u64()).ok()
}

/// Formats bytes with a binary unit.
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4MiB"), Some(4 << 20));
        assert_eq!(parse_size("256K"), Some(256 << 10));
        assert_eq!(parse_size("65536"), Some(65536));
        assert_eq!(parse_size("1 GiB"), Some(1 << 30));
        assert_eq!(parse_size("4 furlongs"), None);
        assert_eq!(parse_size(""), None);
    }
}

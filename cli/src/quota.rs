//! `kvtier quota get|set|rm`: the `IsolatedLRU` quotas in a configuration file.
//!
//! Edits `[adapters.eviction.quotas]` of one `[[adapters]]` table with `toml_edit`, which keeps
//! the file's comments and layout. A change is checked by loading the edited text with the
//! strict configuration parser before anything is written (a quota on a policy other than
//! `IsolatedLRU` is refused with that parser's error), and the file is replaced atomically
//! (a temporary file in the same directory, then a rename). A running tier does not read the
//! file again: it takes quota changes through the `SetQuota` message (see docs/configuration.md, `IsolatedLRU`).

use std::path::{Path, PathBuf};

use toml_edit::{value, DocumentMut, Item, Table};

use crate::common::{human_bytes, parse_size, EXIT_CONFIG, EXIT_FAILURE, EXIT_OK};

/// Command-line arguments of `kvtier quota`.
#[derive(Debug, Clone, clap::Args)]
pub struct QuotaArgs {
    /// What to do.
    #[command(subcommand)]
    pub action: QuotaAction,
    /// The TOML configuration file to read and edit.
    #[arg(
        long,
        short = 'c',
        value_name = "FILE",
        global = true,
        default_value = "kvtier.toml"
    )]
    pub config: PathBuf,
    /// Which `[[adapters]]` table (0-based).
    #[arg(long, default_value_t = 0, global = true)]
    pub adapter: usize,
}

/// A quota action.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum QuotaAction {
    /// Print the adapter's quotas.
    Get,
    /// Set a salt's quota (`""` is the unsalted keys); BYTES takes K, KiB, M, MiB, G, GiB.
    Set {
        /// The cache salt.
        salt: String,
        /// The limit, e.g. 10GiB.
        bytes: String,
    },
    /// Remove a salt's quota (it then falls under the allowlist rule: limit 0).
    Rm {
        /// The cache salt.
        salt: String,
    },
}

/// Runs `kvtier quota`; returns the exit code.
pub fn run(args: &QuotaArgs) -> i32 {
    match apply(args) {
        Ok(out) => {
            print!("{out}");
            EXIT_OK
        }
        Err((code, msg)) => {
            eprintln!("error: {msg}");
            code
        }
    }
}

fn apply(args: &QuotaArgs) -> Result<String, (i32, String)> {
    let path = &args.config;
    let text = std::fs::read_to_string(path)
        .map_err(|e| (EXIT_CONFIG, format!("{}: {e}", path.display())))?;
    let mut doc: DocumentMut = text
        .parse()
        .map_err(|e| (EXIT_CONFIG, format!("{}: not TOML: {e}", path.display())))?;
    let n = args.adapter;
    let adapter = doc
        .get_mut("adapters")
        .and_then(Item::as_array_of_tables_mut)
        .and_then(|a| a.get_mut(n))
        .ok_or_else(|| {
            (
                EXIT_CONFIG,
                format!("{}: no [[adapters]] table #{n}", path.display()),
            )
        })?;
    let quotas = |adapter: &Table| -> Vec<(String, u64)> {
        adapter
            .get("eviction")
            .and_then(|e| e.get("quotas"))
            .and_then(Item::as_table_like)
            .map(|t| {
                t.iter()
                    .map(|(k, v)| (k.to_owned(), v.as_integer().unwrap_or(-1).max(0) as u64))
                    .collect()
            })
            .unwrap_or_default()
    };
    match &args.action {
        QuotaAction::Get => {
            let mut out = String::new();
            for (salt, bytes) in quotas(adapter) {
                out.push_str(&format!("{salt:?}\t{bytes}\t{}\n", human_bytes(bytes)));
            }
            Ok(out)
        }
        QuotaAction::Set { salt, bytes } => {
            let limit = parse_size(bytes).ok_or_else(|| {
                (
                    EXIT_CONFIG,
                    format!("quota {bytes:?}: expected bytes like 10GiB or 1073741824"),
                )
            })?;
            let limit = i64::try_from(limit)
                .map_err(|_| (EXIT_CONFIG, format!("quota {bytes:?}: too large")))?;
            let eviction = adapter
                .entry("eviction")
                .or_insert_with(|| Item::Table(Table::new()))
                .as_table_like_mut()
                .ok_or_else(|| (EXIT_CONFIG, "`eviction` is not a table".to_owned()))?;
            let quotas = eviction
                .entry("quotas")
                .or_insert(Item::Table(Table::new()))
                .as_table_like_mut()
                .ok_or_else(|| (EXIT_CONFIG, "`eviction.quotas` is not a table".to_owned()))?;
            quotas.insert(salt, value(limit));
            save(path, &doc)?;
            Ok(format!(
                "adapter #{n}: quota of {salt:?} set to {} ({limit} bytes)\n",
                human_bytes(limit as u64)
            ))
        }
        QuotaAction::Rm { salt } => {
            let removed = adapter
                .get_mut("eviction")
                .and_then(|e| e.get_mut("quotas"))
                .and_then(Item::as_table_like_mut)
                .and_then(|q| q.remove(salt));
            if removed.is_none() {
                return Err((EXIT_FAILURE, format!("adapter #{n}: no quota for {salt:?}")));
            }
            save(path, &doc)?;
            Ok(format!("adapter #{n}: quota of {salt:?} removed\n"))
        }
    }
}

/// Checks the edited configuration with the strict parser, then replaces the file.
fn save(path: &Path, doc: &DocumentMut) -> Result<(), (i32, String)> {
    let text = doc.to_string();
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .map_err(|e| (EXIT_FAILURE, format!("{}: {e}", dir.display())))?;
    std::io::Write::write_all(&mut tmp, text.as_bytes())
        .map_err(|e| (EXIT_FAILURE, format!("{}: {e}", path.display())))?;
    let check = {
        let mut s = kvtier::ConfigSources::default();
        s.file = Some(tmp.path().to_owned());
        s.env = Some(Default::default());
        kvtier::TierConfig::load(&s)
    };
    if let Err(e) = check {
        return Err((EXIT_CONFIG, format!("not written: {e}")));
    }
    tmp.persist(path)
        .map_err(|e| (EXIT_FAILURE, format!("{}: {e}", path.display())))?;
    Ok(())
}

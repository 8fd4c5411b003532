//! Configuration of the `fs` adapter (field names follow LMCache's `fs` L2 adapter).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::config::FieldError;

/// `type = "fs"`: one file per object under `base_path`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct FsConfig {
    /// Directory holding the objects (required; created if missing).
    pub base_path: PathBuf,
    /// Directory for temporary files, relative to `base_path` (default: none, temporary files
    /// sit beside their final name). Must be relative and must not contain `..`.
    #[serde(default)]
    pub relative_tmp_dir: Option<String>,
    /// Worker threads for blocking file I/O (default 4).
    #[serde(default = "default_workers")]
    pub num_workers: usize,
    /// `fsync` each object before it is renamed into place (default false: the rename alone
    /// already guarantees no torn object is ever visible).
    #[serde(default)]
    pub fsync: bool,
    /// Scan `base_path` at start to rebuild usage and recency (default true).
    #[serde(default = "default_true")]
    pub recover_on_start: bool,
    /// The checksum written with every object and checked on every load (default CRC32C, in
    /// the extended attribute `user.kvtier.crc32c`; `off` for file systems without `user.*`
    /// extended attributes).
    #[serde(default)]
    pub checksum: FsChecksum,
}

/// What the `fs` adapter writes with each object, and checks when it reads one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum FsChecksum {
    /// CRC32C of the bytes, in the extended attribute `user.kvtier.crc32c` (4 bytes, big
    /// endian). The file's name and bytes stay LMCache's.
    #[default]
    Crc32c,
    /// No checksum: only sizes are checked.
    Off,
}

fn default_workers() -> usize {
    4
}
fn default_true() -> bool {
    true
}

impl FsConfig {
    /// A config for `base_path` with every default.
    pub fn new(base_path: impl Into<PathBuf>) -> Self {
        Self {
            base_path: base_path.into(),
            relative_tmp_dir: None,
            num_workers: default_workers(),
            fsync: false,
            recover_on_start: true,
            checksum: FsChecksum::default(),
        }
    }

    /// Checks the values.
    pub fn validate(&self) -> Result<(), FieldError> {
        if self.base_path.as_os_str().is_empty() {
            return Err(FieldError::new("base_path", "must not be empty"));
        }
        if let Some(t) = &self.relative_tmp_dir {
            let p = std::path::Path::new(t);
            if p.is_absolute() || p.components().any(|c| c == std::path::Component::ParentDir) {
                return Err(FieldError::new(
                    "relative_tmp_dir",
                    format!("must be a relative path without '..', got {t:?}"),
                ));
            }
        }
        if !(1..=1024).contains(&self.num_workers) {
            return Err(FieldError::new(
                "num_workers",
                format!("must be between 1 and 1024, got {}", self.num_workers),
            ));
        }
        Ok(())
    }
}

//! Configuration of the `memory` adapter.

use serde::{Deserialize, Serialize};

/// `type = "memory"`: objects kept in the backend actor's own map. It has no fields of its own
/// beyond the common ones (`max_capacity_gb`, `eviction`, `object_name_format`). Meant for
/// embedding and unit tests; its contents die with the process.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct MemoryConfig {}

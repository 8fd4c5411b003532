//! The conformance suite against the `memory` backend.

mod support;

use kvtier::AdapterConfig;
use support::conformance::Fixture;

struct Memory;

impl Fixture for Memory {
    fn adapter(&self, _slot: usize) -> AdapterConfig {
        AdapterConfig::memory()
    }
}

conformance_tests!(Memory);

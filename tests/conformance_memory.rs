//! The conformance suite against the `memory` backend.

use kvtier_testkit as support;

use kvtier::AdapterConfig;
use support::conformance::Fixture;

struct Memory;

impl Fixture for Memory {
    fn adapter(&self, _slot: usize) -> AdapterConfig {
        AdapterConfig::memory()
    }
}

support::conformance_tests!(Memory);

//! Log filtering that keeps credentials out of logs.
//!
//! kvtier itself never logs a secret. Two dependencies do, below INFO, when a host turns their
//! logging up: the AWS SDK prints the S3 access key id (never the secret key) in its signing
//! and request-orchestration records (`aws_sigv4` at TRACE, `aws_smithy_runtime` and
//! `aws_sdk_s3` at DEBUG and TRACE), and `ureq_proto` hex-dumps every request at TRACE, `Authorization: Bearer <token>`
//! of the Hugging Face Hub included. [`env_filter`] builds a `tracing` filter from the user's
//! directives with those targets capped below the levels that print credentials. The `kvtier`
//! binary uses it for `KVTIER_LOG`; hosts that install their own subscriber should add
//! [`CREDENTIAL_CAPS`] to their filter (or use [`env_filter`]).

use tracing_subscriber::filter::ParseError;
use tracing_subscriber::EnvFilter;

/// `target=level` directives capping the dependencies that print credentials below these levels.
pub const CREDENTIAL_CAPS: &[&str] = &[
    "aws_sdk_s3=info",
    "aws_sigv4=debug",
    "aws_smithy_runtime=info",
    "ureq_proto=debug",
];

/// A filter for `directives` (`tracing` `EnvFilter` syntax, e.g. `"debug"` or
/// `"kvtier=trace,warn"`) with [`CREDENTIAL_CAPS`] applied after them, so they win.
pub fn env_filter(directives: &str) -> Result<EnvFilter, ParseError> {
    let mut all: Vec<&str> = directives
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .collect();
    all.extend_from_slice(CREDENTIAL_CAPS);
    EnvFilter::try_new(all.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_are_appended() {
        let f = env_filter("trace").unwrap().to_string();
        for cap in CREDENTIAL_CAPS {
            assert!(f.contains(cap), "{f}");
        }
        assert!(env_filter("").is_ok());
        assert!(env_filter("kvtier=nonsense=1").is_err());
    }
}

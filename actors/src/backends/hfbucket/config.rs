//! Configuration of the `hfbucket` adapter: the fields of LMCache's `hfbucket` L2 adapter
//! (`hfbucket.rst`), plus `hf_endpoint` and `rebuild_index_on_start`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::config::{FieldError, Secret};

/// The public Hub, used when neither `hf_endpoint` nor `HF_ENDPOINT` is set.
pub(crate) const DEFAULT_HF_ENDPOINT: &str = "https://huggingface.co";
const HANDLE_SCHEME: &str = "hf://buckets/";

/// `type = "hfbucket"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct HfBucketConfig {
    /// `hf://buckets/<namespace>/<bucket>[/<prefix>]`, required.
    pub bucket_handle: String,
    /// Environment variable holding the token (default `"HF_TOKEN"`); used when it is set and
    /// non-empty.
    #[serde(default = "default_token_env")]
    pub token_env: String,
    /// Token used when the `token_env` variable is unset or empty.
    #[serde(default)]
    pub token: Option<Secret>,
    /// Create the bucket on the first store if it does not exist (default false).
    #[serde(default)]
    pub create_bucket_if_missing: bool,
    /// Root directory for temporary load downloads (default: the system temp directory).
    #[serde(default)]
    pub download_tmp_dir: Option<PathBuf>,
    /// TTL of the path-size metadata cache behind lookups, seconds (default 30; 0 disables).
    #[serde(default = "default_ttl")]
    pub metadata_cache_ttl_secs: f64,
    /// Worker threads for blocking Hub calls (default 4).
    #[serde(default = "default_workers")]
    pub num_workers: usize,
    /// Hub base URL (default: the `HF_ENDPOINT` variable, else `https://huggingface.co`).
    #[serde(default)]
    pub hf_endpoint: Option<String>,
    /// List the bucket at start to rebuild usage and LRU order; default true when
    /// `max_capacity_gb > 0`.
    #[serde(default)]
    pub rebuild_index_on_start: Option<bool>,
    /// Seconds an open circuit breaker waits before letting a probe through to the Hub
    /// (default 5, as the `s3` adapter's). The breaker opens after 3 consecutive requests
    /// that could not reach the Hub, timed out, or kept getting 5xx or 429 after the retries.
    #[serde(default = "default_cooldown")]
    pub circuit_breaker_cooldown_secs: f64,
    /// The total deadline of one Hub or Xet CAS request, every attempt and every wait between
    /// them included (default 120; in (0, 86400]): no retry starts that could not begin before
    /// it, and each attempt's timeout is cut to what is left, so no request outlives it
    /// whatever the attempt count, the backoff and `Retry-After` say.
    #[serde(default = "crate::retry::default_retry_timeout_secs")]
    pub retry_timeout_secs: f64,
    /// How Xet compresses the xorbs a store uploads (default `none`: KV tensors barely
    /// compress, and trying costs client CPU on every byte; see [`XetCompression`]).
    #[serde(default)]
    pub xet_compression: XetCompression,
    /// Ask the CAS, for the first chunk of every object, whether it already holds it (Xet's
    /// global deduplication; default false: one more request per object for KV chunks that
    /// are unique by construction). Only with `xet_store_path = "hf-xet"`.
    #[serde(default)]
    pub xet_global_dedup: bool,
    /// Seconds of life a Xet write token must have left for a store commit to run without
    /// Xet's token refresher (default 600). A token with less left is replaced before the
    /// commit starts, so commits shorter than this never need one, and each saves the two
    /// HTTP clients hf-xet builds for a refresher. Commits carry a refresher only when the
    /// Hub issues tokens that live shorter than this. 0 gives every commit a refresher
    /// (hf_xet's behaviour).
    #[serde(default = "default_token_reserve")]
    pub xet_token_reserve_secs: u64,
    /// How loads read the Xet CAS (default `direct`: kvtier's own reconstruction reader,
    /// which decodes into the caller's buffer; `hf-xet`: hf-xet's download stream). See
    /// [`XetLoadPath`].
    #[serde(default)]
    pub xet_load_path: XetLoadPath,
    /// With `xet_load_path = "direct"`: hash every loaded chunk (BLAKE3, as Xet does) and
    /// check the file's Merkle hash against the `xetHash` it was loaded by; a mismatch is an
    /// error (the load then falls back to `resolve`). Default false: nothing else checks
    /// loaded bytes (neither kvtier's reader nor hf-xet's stream verifies chunk hashes; TLS
    /// protects them in transit).
    #[serde(default)]
    pub xet_verify_loads: bool,
    /// How stores write to the Xet CAS (default `direct`: kvtier chunks, packs and uploads the
    /// xorbs and the shard itself; `hf-xet`: hf-xet's upload commit). See [`XetStorePath`].
    #[serde(default)]
    pub xet_store_path: XetStorePath,
    /// How `direct` stores cut objects into chunks (default `cdc`: Xet's content-defined
    /// chunker, as the Xet protocol requires, with hf-xet's hashes; `fixed`: 64 KiB pieces,
    /// outside the protocol). See [`XetChunking`].
    #[serde(default)]
    pub xet_chunking: XetChunking,
}

/// How stores write to the Xet CAS (`xet_store_path`). Both write the same Xet format, which
/// every reader reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum XetStorePath {
    /// kvtier's own writer ([`XetChunking`] chunks, packed in order into xorbs, sent from the
    /// caller's memory through the CAS's upload grants with one shard per commit, over the
    /// adapter's Hub client): no deduplication (KV chunks are unique), no per-commit session
    /// and no serialized copy: less client CPU than `hf-xet` (docs/benchmarks.md).
    #[default]
    Direct,
    /// hf-xet's upload commit: its chunker, deduplication and xorb packing, and a session of
    /// its own per commit. The switch back.
    HfXet,
}

impl XetStorePath {
    /// The path's name in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::HfXet => "hf-xet",
            Self::Direct => "direct",
        }
    }
}

/// How `direct` stores cut objects into chunks (`xet_chunking`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum XetChunking {
    /// Xet's content-defined chunker (a rolling hash over every byte): the same chunks, and
    /// so the same Xet hashes, as hf-xet and `huggingface_hub` give the same bytes.
    #[default]
    Cdc,
    /// 64 KiB pieces (the last one shorter): no rolling hash, about 0.6× the client CPU of
    /// `cdc`. Readers never re-chunk, so every reader reads the objects back; but the Xet
    /// protocol says chunk boundaries MUST follow its chunking algorithm, so the objects'
    /// hashes are not the ones another client computes for the same bytes, and a CAS that
    /// checks boundaries would refuse them. For a CAS you run yourself.
    Fixed,
}

impl XetChunking {
    /// The chunking's name in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cdc => "cdc",
            Self::Fixed => "fixed",
        }
    }
}

/// How loads read the Xet CAS (`xet_load_path`). Both read every compression scheme and fall
/// back to `resolve` when a Xet read fails.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum XetLoadPath {
    /// kvtier's reader: the file's reconstruction from the CAS (`/v1/reconstructions`), one
    /// range request per term, chunks decoded in place in the caller's buffer. No buffer per
    /// load, and about half the client CPU of `hf-xet` (docs/benchmarks.md).
    #[default]
    Direct,
    /// hf-xet's download stream: each term decoded into a new buffer, then copied into the
    /// caller's. The switch back, should a CAS not serve the first reconstruction version.
    HfXet,
}

impl XetLoadPath {
    /// The path's name in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Direct => "direct",
            Self::HfXet => "hf-xet",
        }
    }
}

/// The xorb compression scheme of stores (`xet_compression`). Readers (hf_xet,
/// `huggingface_hub`, LMCache) decode every scheme: the scheme is recorded per chunk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum XetCompression {
    /// No compression: chunks are stored as they are.
    #[default]
    None,
    /// LZ4 on every chunk (kept only where it shrinks the chunk).
    Lz4,
    /// Byte grouping in 4 lanes, then LZ4 (suits floating-point data best).
    Bg4Lz4,
    /// Xet's own choice between `lz4` and `bg4-lz4`, from a sample of the data (hf_xet's
    /// default, and so `huggingface_hub`'s and LMCache's).
    Auto,
}

impl XetCompression {
    /// The scheme's name in Xet's configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Lz4 => "lz4",
            Self::Bg4Lz4 => "bg4-lz4",
            Self::Auto => "auto",
        }
    }
}

fn default_token_env() -> String {
    "HF_TOKEN".into()
}
fn default_ttl() -> f64 {
    30.0
}
fn default_workers() -> usize {
    4
}
fn default_cooldown() -> f64 {
    5.0
}
fn default_token_reserve() -> u64 {
    600
}

/// Why a bucket handle was rejected. The handle is quoted (trimmed, at most 200 characters).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HandleError {
    /// It does not start with `hf://buckets/`.
    #[error("{handle:?} must start with \"hf://buckets/\"")]
    Scheme {
        /// The handle.
        handle: String,
    },
    /// It lacks a namespace or a bucket.
    #[error(
        "{handle:?} must name a namespace and a bucket: hf://buckets/<namespace>/<bucket>[/<prefix>]"
    )]
    Incomplete {
        /// The handle.
        handle: String,
    },
    /// A segment is `.` or `..`.
    #[error("{handle:?} must not contain '.' or '..' segments")]
    DotSegment {
        /// The handle.
        handle: String,
    },
    /// The namespace or the bucket has a character outside `A-Z a-z 0-9 - _ .` (they go into
    /// URLs verbatim).
    #[error("{handle:?}: the {part} {name:?} may only contain A-Z a-z 0-9 '-' '_' '.'")]
    BadName {
        /// The handle.
        handle: String,
        /// `namespace` or `bucket`.
        part: &'static str,
        /// The rejected name.
        name: String,
    },
}

/// A parsed bucket handle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketHandle {
    /// The owner (user or organisation).
    pub namespace: String,
    /// The bucket name.
    pub bucket: String,
    /// Path prefix inside the bucket, without leading or trailing `/` (`None`: the root).
    pub prefix: Option<String>,
}

impl BucketHandle {
    /// Parses `hf://buckets/<ns>/<bucket>[/<prefix>]`: whitespace trimmed, empty segments
    /// dropped, at least a namespace and a bucket, which may only use `A-Z a-z 0-9 - _ .`.
    pub fn parse(handle: &str) -> Result<Self, HandleError> {
        let h = handle.trim();
        let quoted = || h.chars().take(200).collect::<String>();
        let rest = h
            .strip_prefix(HANDLE_SCHEME)
            .ok_or_else(|| HandleError::Scheme { handle: quoted() })?;
        let segs: Vec<&str> = rest
            .split('/')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        if segs.len() < 2 {
            return Err(HandleError::Incomplete { handle: quoted() });
        }
        if segs.iter().any(|s| *s == "." || *s == "..") {
            return Err(HandleError::DotSegment { handle: quoted() });
        }
        for (part, name) in [("namespace", segs[0]), ("bucket", segs[1])] {
            let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
            if !name.chars().all(ok) {
                return Err(HandleError::BadName {
                    handle: quoted(),
                    part,
                    name: name.chars().take(200).collect(),
                });
            }
        }
        Ok(Self {
            namespace: segs[0].to_owned(),
            bucket: segs[1].to_owned(),
            prefix: (segs.len() > 2).then(|| segs[2..].join("/")),
        })
    }

    /// `<namespace>/<bucket>`.
    pub fn id(&self) -> String {
        format!("{}/{}", self.namespace, self.bucket)
    }

    /// The path of an object: the prefix, one `/`, then the percent-encoded object name.
    pub(crate) fn object_path(&self, object_name: &str) -> String {
        let encoded = crate::key::hf_encode(object_name);
        match &self.prefix {
            Some(p) => format!("{p}/{encoded}"),
            None => encoded,
        }
    }
}

impl HfBucketConfig {
    /// A config for a handle with every default.
    pub fn new(bucket_handle: impl Into<String>) -> Self {
        Self {
            bucket_handle: bucket_handle.into(),
            token_env: default_token_env(),
            token: None,
            create_bucket_if_missing: false,
            download_tmp_dir: None,
            metadata_cache_ttl_secs: default_ttl(),
            num_workers: default_workers(),
            hf_endpoint: None,
            rebuild_index_on_start: None,
            circuit_breaker_cooldown_secs: default_cooldown(),
            retry_timeout_secs: crate::retry::DEFAULT_RETRY_TIMEOUT.as_secs_f64(),
            xet_compression: XetCompression::default(),
            xet_global_dedup: false,
            xet_token_reserve_secs: default_token_reserve(),
            xet_load_path: XetLoadPath::default(),
            xet_verify_loads: false,
            xet_store_path: XetStorePath::default(),
            xet_chunking: XetChunking::default(),
        }
    }

    /// Checks every field and parses the handle.
    pub fn validate(&self) -> Result<BucketHandle, FieldError> {
        let handle = BucketHandle::parse(&self.bucket_handle)
            .map_err(|e| FieldError::new("bucket_handle", e.to_string()))?;
        let t = self.metadata_cache_ttl_secs;
        if !(t.is_finite() && t >= 0.0) {
            return Err(FieldError::new(
                "metadata_cache_ttl_secs",
                format!("must be a finite number >= 0, got {t}"),
            ));
        }
        let r = self.retry_timeout_secs;
        if !(r.is_finite() && r > 0.0 && r <= 86_400.0) {
            return Err(FieldError::new(
                "retry_timeout_secs",
                format!("must be a number of seconds in (0, 86400], got {r}"),
            ));
        }
        let c = self.circuit_breaker_cooldown_secs;
        if !(c.is_finite() && c >= 0.0) {
            return Err(FieldError::new(
                "circuit_breaker_cooldown_secs",
                format!("must be a finite number >= 0, got {c}"),
            ));
        }
        if !(1..=1024).contains(&self.num_workers) {
            return Err(FieldError::new(
                "num_workers",
                format!("must be between 1 and 1024, got {}", self.num_workers),
            ));
        }
        if self.xet_chunking != XetChunking::Cdc && self.xet_store_path != XetStorePath::Direct {
            return Err(FieldError::new(
                "xet_chunking",
                format!(
                    "{:?} needs xet_store_path = \"direct\" (hf-xet always uses Xet's chunker)",
                    self.xet_chunking.as_str()
                ),
            ));
        }
        if self.xet_global_dedup && self.xet_store_path != XetStorePath::HfXet {
            return Err(FieldError::new(
                "xet_global_dedup",
                "needs xet_store_path = \"hf-xet\" (kvtier's own writer does not deduplicate)",
            ));
        }
        if let Some(e) = &self.hf_endpoint {
            if !(e.starts_with("http://") || e.starts_with("https://")) {
                return Err(FieldError::new(
                    "hf_endpoint",
                    format!("{e:?} must be an http:// or https:// URL"),
                ));
            }
        }
        Ok(handle)
    }

    /// The token: the `token_env` variable when set and non-empty, else `token`. `env` looks a
    /// variable up (the process environment in production).
    pub(crate) fn resolve_token(&self, env: impl Fn(&str) -> Option<String>) -> Option<Secret> {
        match env(&self.token_env) {
            Some(v) if !v.trim().is_empty() => Some(Secret::new(v.trim())),
            _ => self.token.clone(),
        }
    }

    /// The Hub base URL: `hf_endpoint`, else `HF_ENDPOINT` from `env`, else the public Hub.
    pub(crate) fn resolve_endpoint(&self, env: impl Fn(&str) -> Option<String>) -> String {
        self.hf_endpoint
            .clone()
            .or_else(|| env("HF_ENDPOINT").filter(|e| !e.trim().is_empty()))
            .unwrap_or_else(|| DEFAULT_HF_ENDPOINT.to_owned())
            .trim_end_matches('/')
            .to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles() {
        let ok = [
            (
                "hf://buckets/my-org/lmcache-kv",
                "my-org",
                "lmcache-kv",
                None,
            ),
            (
                "hf://buckets/my-org/lmcache-kv/prod",
                "my-org",
                "lmcache-kv",
                Some("prod"),
            ),
            (
                "  hf://buckets/my-org/kv/a/b/  ",
                "my-org",
                "kv",
                Some("a/b"),
            ),
            ("hf://buckets//my-org//kv//p//", "my-org", "kv", Some("p")),
        ];
        for (h, ns, b, p) in ok {
            let parsed = BucketHandle::parse(h).unwrap();
            assert_eq!(
                (
                    parsed.namespace.as_str(),
                    parsed.bucket.as_str(),
                    parsed.prefix.as_deref()
                ),
                (ns, b, p),
                "{h}"
            );
        }
        for bad in [
            "",
            "hf://buckets/",
            "hf://buckets/only-ns",
            "hf://buckets//ns/",
            "hf://models/org/repo",
            "s3://bucket",
            "buckets/org/b",
            "hf://buckets/org/b/../x",
        ] {
            assert!(BucketHandle::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn object_paths() {
        let h = BucketHandle::parse("hf://buckets/o/b/prod").unwrap();
        assert_eq!(
            h.object_path("llama@000000ff@00010203"),
            "prod/llama%40000000ff%4000010203"
        );
        let h = BucketHandle::parse("hf://buckets/o/b").unwrap();
        assert_eq!(h.object_path("m/x@00000000@ab"), "m%2Fx%4000000000%40ab");
        assert_eq!(h.id(), "o/b");
    }

    #[test]
    fn token_precedence() {
        let mut c = HfBucketConfig::new("hf://buckets/o/b");
        let env = |v: Option<&'static str>| {
            move |name: &str| (name == "HF_TOKEN").then(|| v.map(str::to_owned)).flatten()
        };
        assert_eq!(c.resolve_token(env(None)), None);
        c.token = Some(Secret::new("from-config"));
        assert_eq!(c.resolve_token(env(None)).unwrap().expose(), "from-config");
        assert_eq!(
            c.resolve_token(env(Some(""))).unwrap().expose(),
            "from-config",
            "empty variable is unset"
        );
        assert_eq!(
            c.resolve_token(env(Some("from-env"))).unwrap().expose(),
            "from-env"
        );
        c.token_env = "OTHER".into();
        assert_eq!(
            c.resolve_token(env(Some("from-env"))).unwrap().expose(),
            "from-config"
        );
    }

    #[test]
    fn endpoint_precedence_and_validation() {
        let mut c = HfBucketConfig::new("hf://buckets/o/b");
        assert_eq!(c.resolve_endpoint(|_| None), DEFAULT_HF_ENDPOINT);
        assert_eq!(
            c.resolve_endpoint(|_| Some("http://127.0.0.1:9/".into())),
            "http://127.0.0.1:9"
        );
        c.hf_endpoint = Some("http://hub.local".into());
        assert_eq!(
            c.resolve_endpoint(|_| Some("http://other".into())),
            "http://hub.local"
        );
        c.hf_endpoint = Some("hub.local".into());
        assert_eq!(c.validate().unwrap_err().field, "hf_endpoint");
        let mut c = HfBucketConfig::new("hf://buckets/o/b");
        c.num_workers = 0;
        assert_eq!(c.validate().unwrap_err().field, "num_workers");
        c.num_workers = 4;
        c.metadata_cache_ttl_secs = -1.0;
        assert_eq!(c.validate().unwrap_err().field, "metadata_cache_ttl_secs");
        c.metadata_cache_ttl_secs = 0.0;
        c.circuit_breaker_cooldown_secs = f64::NAN;
        assert_eq!(
            c.validate().unwrap_err().field,
            "circuit_breaker_cooldown_secs"
        );
        c.circuit_breaker_cooldown_secs = 0.5;
        assert!(c.validate().is_ok());
        let c = HfBucketConfig::new("hf://buckets/o");
        assert_eq!(c.validate().unwrap_err().field, "bucket_handle");
    }

    #[test]
    fn store_path_options_need_their_store_path() {
        let parse = |j: serde_json::Value| {
            let mut j = j;
            j["bucket_handle"] = "hf://buckets/o/b".into();
            serde_json::from_value::<HfBucketConfig>(j).unwrap()
        };
        let c = parse(serde_json::json!({}));
        assert_eq!(
            (c.xet_store_path, c.xet_chunking),
            (XetStorePath::Direct, XetChunking::Cdc)
        );
        assert!(parse(serde_json::json!({"xet_chunking": "fixed"}))
            .validate()
            .is_ok());
        let e = parse(serde_json::json!({"xet_store_path": "hf-xet", "xet_chunking": "fixed"}))
            .validate()
            .unwrap_err();
        assert_eq!(e.field, "xet_chunking");
        assert!(e.message.contains("xet_store_path"), "{e}");
        assert_eq!(
            parse(serde_json::json!({"xet_global_dedup": true}))
                .validate()
                .unwrap_err()
                .field,
            "xet_global_dedup"
        );
        assert!(
            parse(serde_json::json!({"xet_store_path": "hf-xet", "xet_global_dedup": true}))
                .validate()
                .is_ok()
        );
    }
}

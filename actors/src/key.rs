//! Object keys and their wire names.
//!
//! An [`ObjectKey`] identifies one KV chunk: the model, the tensor-parallel rank, the chunk hash,
//! an optional cache salt (per-user isolation) and an object group id. Every backend stores a
//! key's bytes under its *object name*, which is byte-for-byte the name LMCache's MP mode uses,
//! so a store written by one can be read by the other:
//!
//! * [`NameFormat::Seed`] (default): `<model>@<kv_rank:08x>@<chunk_hash hex>[@<cache_salt>]`
//! * [`NameFormat::Grouped`] (newer LMCache): `<model>@<kv_rank:08x>@<group:x>@<chunk_hash hex>[@<cache_salt>]`
//!
//! Hugging Face bucket paths percent-encode the name ([`hf_encode`]), keeping only
//! `A-Z a-z 0-9 _ . - ~`.
//!
//! Invariants:
//! * One key, one name: [`ObjectKey::parse`] is the inverse of [`ObjectKey::object_name`] and
//!   rejects every spelling `object_name` never writes (leading zeros in the group, an empty
//!   salt field).
//! * An empty cache salt is no salt: `with_salt("")` returns the unsalted key (equal, same hash,
//!   same name), as LMCache appends `@<salt>` only for a non-empty salt.
//! * The seed format has no group field, so it can name only keys of group 0; keys of another
//!   group fail `ObjectKey::check_name_format` and the backends refuse them.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use bytes::Bytes;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde::{Deserialize, Serialize};

/// Longest cache salt accepted, in characters.
pub const MAX_SALT_CHARS: usize = 128;

/// Why a key or an object name was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The model name was empty.
    #[error("model_name must not be empty")]
    EmptyModel,
    /// The model name contained the `@` separator.
    #[error("model_name {model:?} must not contain '@'")]
    ModelHasSeparator {
        /// The rejected model name.
        model: String,
    },
    /// The chunk hash was empty.
    #[error("chunk_hash must not be empty")]
    EmptyHash,
    /// The cache salt was too long.
    #[error("cache_salt is {chars} characters long; at most {MAX_SALT_CHARS} are allowed")]
    SaltTooLong {
        /// Its length in characters.
        chars: usize,
    },
    /// The cache salt contained a forbidden character.
    #[error("cache_salt must not contain {ch:?} (forbidden: '@', '/', '\\\\', NUL)")]
    SaltForbiddenChar {
        /// The offending character.
        ch: char,
    },
    /// A key of a non-zero object group reached an adapter whose name format has no group
    /// field: its object would be the group-0 key's object.
    #[error(
        "object_group_id {object_group_id} cannot be named in the seed object name format, \
         which has no group field (keys differing only in object_group_id would share one \
         object); set object_name_format = \"grouped\" on this adapter"
    )]
    GroupNeedsGroupedFormat {
        /// The key's object group id.
        object_group_id: u32,
    },
    /// An object name did not have the expected shape.
    #[error("object name {name:?} is not a {format} object name: {reason}")]
    BadName {
        /// The rejected name (truncated to 200 characters).
        name: String,
        /// The format it was parsed as.
        format: NameFormat,
        /// What was wrong.
        reason: &'static str,
    },
}

/// How object names are spelled; a per-adapter option (`object_name_format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NameFormat {
    /// `<model>@<kv_rank:08x>@<chunk_hash hex>[@<cache_salt>]`, as in the seeds (default).
    #[default]
    Seed,
    /// `<model>@<kv_rank:08x>@<object_group_id:x>@<chunk_hash hex>[@<cache_salt>]` (newer LMCache).
    Grouped,
}

impl fmt::Display for NameFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NameFormat::Seed => "seed",
            NameFormat::Grouped => "grouped",
        })
    }
}

/// The identity of one KV chunk. Cheap to clone: one reference-count increment.
///
/// A 64-bit digest of all fields is computed once when the key is built, so hashing a key into
/// the runtime's maps costs one `u64` (see `KeyMap`) and unequal keys usually compare unequal
/// at the first word.
#[derive(Clone)]
pub struct ObjectKey(Arc<KeyFields>);

#[derive(Clone)]
struct KeyFields {
    model_name: Arc<str>,
    kv_rank: u32,
    chunk_hash: Bytes,
    cache_salt: Option<Arc<str>>,
    object_group_id: u32,
    digest: u64,
}

impl PartialEq for ObjectKey {
    fn eq(&self, other: &Self) -> bool {
        if Arc::ptr_eq(&self.0, &other.0) {
            return true;
        }
        self.0.digest == other.0.digest
            && self.0.kv_rank == other.0.kv_rank
            && self.0.object_group_id == other.0.object_group_id
            && self.0.chunk_hash == other.0.chunk_hash
            && self.0.model_name == other.0.model_name
            && self.0.cache_salt == other.0.cache_salt
    }
}

impl Eq for ObjectKey {}

impl Hash for ObjectKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.0.digest);
    }
}

impl PartialOrd for ObjectKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ObjectKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (
            &self.0.model_name,
            self.0.kv_rank,
            &self.0.chunk_hash,
            &self.0.cache_salt,
            self.0.object_group_id,
        )
            .cmp(&(
                &other.0.model_name,
                other.0.kv_rank,
                &other.0.chunk_hash,
                &other.0.cache_salt,
                other.0.object_group_id,
            ))
    }
}

/// Builds hashers for maps keyed by [`ObjectKey`]: a key hashes as its precomputed digest
/// (one `write_u64`), which nohash-hasher passes through unchanged. nohash-hasher is the
/// maintained crate for exactly this (a hasher for keys that already are hashes); it allows
/// only types marked [`nohash_hasher::IsEnabled`] (ObjectKey and the integers), so a map whose
/// keys would need a real hash does not compile with it.
pub(crate) type BuildDigestHasher<K = ObjectKey> = nohash_hasher::BuildNoHashHasher<K>;

impl nohash_hasher::IsEnabled for ObjectKey {}

/// A map keyed by [`ObjectKey`] with the digest hasher.
pub(crate) type KeyMap<V> = HashMap<ObjectKey, V, BuildDigestHasher>;
/// A set of [`ObjectKey`]s with the digest hasher.
pub(crate) type KeySet = HashSet<ObjectKey, BuildDigestHasher>;

impl ObjectKey {
    /// A key without salt in group 0. Fails on an empty or `@`-containing model or an empty hash.
    pub fn new(
        model_name: impl AsRef<str>,
        kv_rank: u32,
        chunk_hash: impl Into<Bytes>,
    ) -> Result<Self, KeyError> {
        let model = model_name.as_ref();
        if model.is_empty() {
            return Err(KeyError::EmptyModel);
        }
        if model.contains('@') {
            return Err(KeyError::ModelHasSeparator {
                model: truncate(model),
            });
        }
        let chunk_hash = chunk_hash.into();
        if chunk_hash.is_empty() {
            return Err(KeyError::EmptyHash);
        }
        Ok(KeyFields {
            model_name: Arc::from(model),
            kv_rank,
            chunk_hash,
            cache_salt: None,
            object_group_id: 0,
            digest: 0,
        }
        .sealed())
    }

    /// This key with a cache salt (at most 128 characters, none of `@ / \` or NUL). An empty
    /// salt means no salt: the result equals the unsalted key and has its object name.
    pub fn with_salt(self, salt: impl AsRef<str>) -> Result<Self, KeyError> {
        let salt = salt.as_ref();
        validate_salt(salt)?;
        let mut f = KeyFields::clone(&self.0);
        f.cache_salt = (!salt.is_empty()).then(|| Arc::from(salt));
        Ok(f.sealed())
    }

    /// This key sharing the model name of `self` but with another chunk hash (cheap: no string copy).
    pub fn with_hash(&self, chunk_hash: impl Into<Bytes>) -> Result<Self, KeyError> {
        let chunk_hash = chunk_hash.into();
        if chunk_hash.is_empty() {
            return Err(KeyError::EmptyHash);
        }
        Ok(KeyFields {
            chunk_hash,
            ..KeyFields::clone(&self.0)
        }
        .sealed())
    }

    /// This key in another object group.
    pub fn with_group(self, object_group_id: u32) -> Self {
        let mut f = KeyFields::clone(&self.0);
        f.object_group_id = object_group_id;
        f.sealed()
    }

    /// The model name.
    pub fn model_name(&self) -> &str {
        &self.0.model_name
    }

    /// The KV rank.
    pub fn kv_rank(&self) -> u32 {
        self.0.kv_rank
    }

    /// The chunk hash bytes.
    pub fn chunk_hash(&self) -> &Bytes {
        &self.0.chunk_hash
    }

    /// The cache salt, if any (never `Some("")`: an empty salt is no salt).
    pub fn cache_salt(&self) -> Option<&str> {
        self.0.cache_salt.as_deref()
    }

    /// The cache salt as a shared string, if any (used for per-salt accounting).
    pub(crate) fn cache_salt_arc(&self) -> Option<&Arc<str>> {
        self.0.cache_salt.as_ref()
    }

    /// The object group id (0 by default).
    pub fn object_group_id(&self) -> u32 {
        self.0.object_group_id
    }

    /// Whether `format` can name this key: the seed format has no group field, so it names only
    /// keys of group 0 ([`KeyError::GroupNeedsGroupedFormat`] otherwise). Backends check this
    /// before any I/O, so two keys never share one object.
    pub(crate) fn check_name_format(&self, format: NameFormat) -> Result<(), KeyError> {
        match (format, self.0.object_group_id) {
            (NameFormat::Seed, g) if g != 0 => {
                Err(KeyError::GroupNeedsGroupedFormat { object_group_id: g })
            }
            _ => Ok(()),
        }
    }

    /// The object name in the given format. The seed format leaves out the group id, so check
    /// `ObjectKey::check_name_format` first where that matters.
    pub fn object_name(&self, format: NameFormat) -> String {
        use std::fmt::Write;
        let mut s = String::with_capacity(
            self.0.model_name.len()
                + 20
                + self.0.chunk_hash.len() * 2
                + self.0.cache_salt.as_ref().map_or(0, |s| s.len() + 1),
        );
        s.push_str(&self.0.model_name);
        let _ = write!(s, "@{:08x}@", self.0.kv_rank);
        if format == NameFormat::Grouped {
            let _ = write!(s, "{:x}@", self.0.object_group_id);
        }
        s.push_str(&hex::encode(&self.0.chunk_hash));
        if let Some(salt) = &self.0.cache_salt {
            s.push('@');
            s.push_str(salt);
        }
        s
    }

    /// Parses an object name written in `format` back to its key.
    pub fn parse(name: &str, format: NameFormat) -> Result<Self, KeyError> {
        let bad = |reason| KeyError::BadName {
            name: truncate(name),
            format,
            reason,
        };
        let parts: Vec<&str> = name.split('@').collect();
        let fixed = match format {
            NameFormat::Seed => 3,
            NameFormat::Grouped => 4,
        };
        if parts.len() != fixed && parts.len() != fixed + 1 {
            return Err(bad("wrong number of '@'-separated fields"));
        }
        let rank = parts[1];
        if rank.len() != 8 || !is_lower_hex(rank) {
            return Err(bad("kv_rank is not 8 lowercase hex digits"));
        }
        let kv_rank = u32::from_str_radix(rank, 16).map_err(|_| bad("kv_rank is not hex"))?;
        let (group, hash) = match format {
            NameFormat::Seed => (0, parts[2]),
            NameFormat::Grouped => {
                let g = parts[2];
                if g.is_empty() || g.len() > 8 || !is_lower_hex(g) {
                    return Err(bad("object_group_id is not lowercase hex"));
                }
                if g.len() > 1 && g.starts_with('0') {
                    // One key, one name: `{:x}` never writes leading zeros.
                    return Err(bad("object_group_id has leading zeros"));
                }
                let g =
                    u32::from_str_radix(g, 16).map_err(|_| bad("object_group_id is not hex"))?;
                (g, parts[3])
            }
        };
        if !hash.len().is_multiple_of(2) || !is_lower_hex(hash) {
            return Err(bad("chunk_hash is not lowercase hex of whole bytes"));
        }
        let hash = hex::decode(hash).map_err(|_| bad("chunk_hash is not hex"))?;
        let mut key = ObjectKey::new(parts[0], kv_rank, hash)
            .map_err(|_| bad("model_name or chunk_hash is empty"))?
            .with_group(group);
        if parts.len() == fixed + 1 {
            if parts[fixed].is_empty() {
                // One key, one name: an empty salt is no salt, written without the '@'.
                return Err(bad(
                    "cache_salt is empty (an unsalted name has no trailing '@')",
                ));
            }
            key = key
                .with_salt(parts[fixed])
                .map_err(|_| bad("cache_salt is not valid"))?;
        }
        Ok(key)
    }
}

impl KeyFields {
    /// Computes the digest and wraps the fields into a key.
    fn sealed(mut self) -> ObjectKey {
        let mut h = DefaultHasher::new();
        self.model_name.hash(&mut h);
        self.kv_rank.hash(&mut h);
        self.chunk_hash.hash(&mut h);
        self.cache_salt.hash(&mut h);
        self.object_group_id.hash(&mut h);
        self.digest = h.finish();
        ObjectKey(Arc::new(self))
    }
}

impl fmt::Debug for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ObjectKey({})", self.object_name(NameFormat::Grouped))
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.object_name(NameFormat::Seed))
    }
}

/// A JSON-friendly view of a key, used by `kvtier ls --json` and status output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyView {
    /// The model name.
    pub model_name: String,
    /// The KV rank.
    pub kv_rank: u32,
    /// The chunk hash as lowercase hex.
    pub chunk_hash: String,
    /// The cache salt, if any.
    pub cache_salt: Option<String>,
    /// The object group id.
    pub object_group_id: u32,
}

impl From<&ObjectKey> for KeyView {
    fn from(k: &ObjectKey) -> Self {
        Self {
            model_name: k.model_name().to_owned(),
            kv_rank: k.kv_rank(),
            chunk_hash: hex::encode(k.chunk_hash()),
            cache_salt: k.cache_salt().map(str::to_owned),
            object_group_id: k.object_group_id(),
        }
    }
}

/// Checks a cache salt: at most 128 characters, none of `@ / \` or NUL.
pub(crate) fn validate_salt(salt: &str) -> Result<(), KeyError> {
    let chars = salt.chars().count();
    if chars > MAX_SALT_CHARS {
        return Err(KeyError::SaltTooLong { chars });
    }
    if let Some(ch) = salt.chars().find(|c| matches!(c, '@' | '/' | '\\' | '\0')) {
        return Err(KeyError::SaltForbiddenChar { ch });
    }
    Ok(())
}

/// Characters the Hugging Face path encoding escapes: everything but `A-Z a-z 0-9 _ . - ~`.
const HF_ESCAPED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'_')
    .remove(b'.')
    .remove(b'-')
    .remove(b'~');

/// Percent-encodes an object name for a Hugging Face bucket path (uppercase hex; `/` and `@` encoded).
pub fn hf_encode(name: &str) -> String {
    utf8_percent_encode(name, HF_ESCAPED).to_string()
}

/// Reverses [`hf_encode`]; `None` when the result is not UTF-8.
#[cfg(any(test, feature = "hfbucket"))]
pub(crate) fn hf_decode(encoded: &str) -> Option<String> {
    percent_encoding::percent_decode_str(encoded)
        .decode_utf8()
        .ok()
        .map(|c| c.into_owned())
}

fn is_lower_hex(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn truncate(s: &str) -> String {
    s.chars().take(200).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn llama() -> ObjectKey {
        ObjectKey::new("llama", 255, vec![0u8, 1, 2, 3]).unwrap()
    }

    #[test]
    fn seed_vectors_from_design() {
        assert_eq!(
            llama().object_name(NameFormat::Seed),
            "llama@000000ff@00010203"
        );
        let salted = llama().with_salt("user-42").unwrap();
        assert_eq!(
            salted.object_name(NameFormat::Seed),
            "llama@000000ff@00010203@user-42"
        );
        assert_eq!(
            llama().object_name(NameFormat::Grouped),
            "llama@000000ff@0@00010203"
        );
        assert_eq!(
            llama().with_group(26).object_name(NameFormat::Grouped),
            "llama@000000ff@1a@00010203"
        );
    }

    #[test]
    fn names_parse_back() {
        for fmt in [NameFormat::Seed, NameFormat::Grouped] {
            for key in [
                llama(),
                llama().with_salt("user-42").unwrap(),
                ObjectKey::new("m", u32::MAX, vec![0xffu8; 32]).unwrap(),
            ] {
                let key = if fmt == NameFormat::Grouped {
                    key.with_group(7)
                } else {
                    key
                };
                assert_eq!(ObjectKey::parse(&key.object_name(fmt), fmt).unwrap(), key);
            }
        }
    }

    #[test]
    fn bad_names_are_named_errors() {
        for name in [
            "",
            "llama",
            "llama@ff@00",
            "llama@000000FF@00",
            "llama@000000ff@0",
            "llama@000000ff@",
            "@000000ff@00",
            "llama@000000ff@00@a@b",
            "llama@000000ff@zz",
        ] {
            assert!(
                matches!(
                    ObjectKey::parse(name, NameFormat::Seed),
                    Err(KeyError::BadName { .. })
                ),
                "{name}"
            );
        }
    }

    #[test]
    fn grouped_names_are_canonical() {
        assert!(ObjectKey::parse("llama@000000ff@1a@00", NameFormat::Grouped).is_ok());
        assert!(ObjectKey::parse("llama@000000ff@0@00", NameFormat::Grouped).is_ok());
        assert_eq!(
            ObjectKey::parse("llama@000000ff@01a@00", NameFormat::Grouped)
                .unwrap_err()
                .to_string(),
            "object name \"llama@000000ff@01a@00\" is not a grouped object name: \
             object_group_id has leading zeros"
        );
    }

    #[test]
    fn key_validation() {
        assert_eq!(ObjectKey::new("", 0, vec![1u8]), Err(KeyError::EmptyModel));
        assert!(matches!(
            ObjectKey::new("a@b", 0, vec![1u8]),
            Err(KeyError::ModelHasSeparator { .. })
        ));
        assert_eq!(
            ObjectKey::new("m", 0, Vec::<u8>::new()),
            Err(KeyError::EmptyHash)
        );
        assert!(llama().with_salt("x".repeat(128)).is_ok());
        assert_eq!(
            llama().with_salt("x".repeat(129)),
            Err(KeyError::SaltTooLong { chars: 129 })
        );
        for ch in ['@', '/', '\\', '\0'] {
            assert_eq!(
                llama().with_salt(format!("a{ch}b")),
                Err(KeyError::SaltForbiddenChar { ch })
            );
        }
    }

    #[test]
    fn empty_salt_is_no_salt() {
        use std::hash::BuildHasher;
        let plain = llama();
        let empty = llama().with_salt("").unwrap();
        assert_eq!(empty, plain);
        assert_eq!(empty.cmp(&plain), std::cmp::Ordering::Equal);
        let h = <BuildDigestHasher>::default();
        assert_eq!(h.hash_one(&empty), h.hash_one(&plain));
        assert_eq!(empty.cache_salt(), None);
        assert_eq!(empty.cache_salt_arc(), None);
        assert_eq!(KeyView::from(&empty).cache_salt, None);
        for fmt in [NameFormat::Seed, NameFormat::Grouped] {
            assert_eq!(empty.object_name(fmt), plain.object_name(fmt));
            assert!(!empty.object_name(fmt).ends_with('@'));
        }
        assert_eq!(
            hf_encode(&empty.object_name(NameFormat::Seed)),
            "llama%40000000ff%4000010203"
        );
        // A salted key salted again with "" loses its salt, as with any other new salt.
        let salted = llama().with_salt("user-42").unwrap();
        assert_eq!(salted.with_salt("").unwrap(), plain);
        let mut set = KeySet::default();
        set.insert(plain.clone());
        assert!(set.contains(&empty));
    }

    #[test]
    fn empty_salt_field_is_not_a_name() {
        // `object_name` never writes a trailing '@', so parsing refuses it: one key, one name.
        for (name, fmt) in [
            ("llama@000000ff@00010203@", NameFormat::Seed),
            ("llama@000000ff@0@00010203@", NameFormat::Grouped),
        ] {
            assert_eq!(
                ObjectKey::parse(name, fmt).unwrap_err().to_string(),
                format!(
                    "object name {name:?} is not a {fmt} object name: \
                     cache_salt is empty (an unsalted name has no trailing '@')"
                )
            );
        }
    }

    #[test]
    fn seed_format_names_only_group_zero() {
        assert_eq!(llama().check_name_format(NameFormat::Seed), Ok(()));
        assert_eq!(
            llama().with_group(0).check_name_format(NameFormat::Seed),
            Ok(())
        );
        let g = llama().with_group(3);
        assert_eq!(g.check_name_format(NameFormat::Grouped), Ok(()));
        let e = g.check_name_format(NameFormat::Seed).unwrap_err();
        assert_eq!(e, KeyError::GroupNeedsGroupedFormat { object_group_id: 3 });
        let msg = e.to_string();
        assert!(msg.contains("object_group_id 3"), "{msg}");
        assert!(msg.contains(r#"object_name_format = "grouped""#), "{msg}");
    }

    #[test]
    fn hf_encoding() {
        let name = "llama@000000ff@00010203@user-42";
        assert_eq!(hf_encode(name), "llama%40000000ff%4000010203%40user-42");
        assert_eq!(hf_encode("a/b c~_.-é"), "a%2Fb%20c~_.-%C3%A9");
        assert_eq!(hf_decode(&hf_encode(name)).unwrap(), name);
    }
}

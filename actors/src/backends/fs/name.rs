//! File names of the `fs` backend, compatible with LMCache 0.5.6's `fs` L2 adapter.
//!
//! LMCache (`lmcache/v1/distributed/l2_adapters/fs_l2_adapter.py`) names an object's file
//! `<model>@0x<kv_rank:08x>@<group:x>@<hash hex>[@<salt>].data`, writing every `/` of the
//! model name as `-SEP-` and reading every `-SEP-` back as `/`. That round trip fails for a
//! model name that contains `-SEP-` itself, or more exactly whose spelling reads back as
//! another name: `org-SEP-model` is read back as `org/model`, `a-SEP/b` as `a/SEP-b`.
//! LMCache gives such a model the file of another model.
//!
//! kvtier writes two spellings of the model field:
//!
//! * **LMCache's**, byte for byte, for every model name that LMCache reads back unchanged
//!   ([`lmcache_round_trips`]): all names without `SEP`, and any with `/`. Either adapter finds
//!   the other's objects.
//! * **Escaped**, for the other names: the model with `%` written as `%25` and `/` as `%2F`
//!   (nothing else), and the rank field marked `~0x` instead of `0x`:
//!   `org-SEP-model@~0x00000003@0@0a0b.data`. LMCache's parser rejects such a name (its
//!   `int("~0x…", 16)` fails), so its start-up scan skips the file instead of indexing it
//!   under another model, and no LMCache spelling ever has the `~0x` mark, so the two
//!   spellings never share a file.
//!
//! No spelling could serve both LMCache and such a model: every `/`-free text is LMCache's
//! spelling of exactly one name that it reads back unchanged (LMCache's reading of the text),
//! so the file LMCache would use for `org-SEP-model` is the file of `org/model`. Objects of
//! those models are therefore kvtier's own; LMCache cannot keep them apart from another
//! model's in the first place.
//!
//! Invariants:
//! * `parse_file_name(&file_name(k, f), f) == Some(k)` for every key `k` the format `f` can
//!   name, and each key has exactly one name: [`parse_file_name`] rejects every spelling
//!   [`file_name`] never writes (the escaped spelling of a name LMCache reads back, escapes
//!   other than `%25` and `%2F`, a bare `%`).
//! * No name contains `/`, and every name ends in `.data`: a name never leaves the directory.

use crate::key::{NameFormat, ObjectKey};

/// Every file name ends in this.
pub(super) const SUFFIX: &str = ".data";
/// How LMCache writes `/` in a model name.
const SEP: &str = "-SEP-";
/// The rank field's mark in LMCache's spelling, and in the escaped one.
const RANK_MARK: &str = "0x";
const ESCAPED_RANK_MARK: &str = "~0x";

/// Whether LMCache 0.5.6's `fs` adapter reads `model`'s file name back as `model` (writing `/`
/// as `-SEP-`, then reading every `-SEP-`, leftmost first, as `/`).
pub fn lmcache_round_trips(model: &str) -> bool {
    // Without "SEP" in the name, every "-SEP-" of the spelling is one the writer put in.
    !model.contains("SEP") || model.replace('/', SEP).replace(SEP, "/") == model
}

/// The escaped spelling: `%` as `%25`, `/` as `%2F`.
fn escape(model: &str) -> String {
    let mut s = String::with_capacity(model.len() + 8);
    for c in model.chars() {
        match c {
            '%' => s.push_str("%25"),
            '/' => s.push_str("%2F"),
            c => s.push(c),
        }
    }
    s
}

/// Reverses [`escape`]; `None` for any escape it never writes.
fn unescape(field: &str) -> Option<String> {
    let mut out = String::with_capacity(field.len());
    let mut rest = field;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..i]);
        let code = rest.get(i + 1..i + 3)?;
        out.push(match code {
            "25" => '%',
            "2F" => '/',
            _ => return None,
        });
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Some(out)
}

/// The file name of a key (see the module docs).
pub fn file_name(key: &ObjectKey, format: NameFormat) -> String {
    let model = key.model_name();
    let mut s = if lmcache_round_trips(model) {
        let mut s = model.replace('/', SEP);
        s.push('@');
        s.push_str(RANK_MARK);
        s
    } else {
        let mut s = escape(model);
        s.push('@');
        s.push_str(ESCAPED_RANK_MARK);
        s
    };
    s.push_str(&format!("{:08x}@", key.kv_rank()));
    if format == NameFormat::Grouped {
        s.push_str(&format!("{:x}@", key.object_group_id()));
    }
    s.push_str(&hex::encode(key.chunk_hash()));
    if let Some(salt) = key.cache_salt() {
        s.push('@');
        s.push_str(salt);
    }
    s.push_str(SUFFIX);
    s
}

/// Parses a file name written by [`file_name`]; `None` for any other file.
pub fn parse_file_name(name: &str, format: NameFormat) -> Option<ObjectKey> {
    let stem = name.strip_suffix(SUFFIX)?;
    // A model name has no '@': the first one ends the model field.
    let (field, rest) = stem.split_once('@')?;
    let model = if let Some(rest_of_rank) = rest.strip_prefix(ESCAPED_RANK_MARK) {
        let model = unescape(field)?;
        if lmcache_round_trips(&model) {
            return None; // written in LMCache's spelling, never escaped
        }
        (model, rest_of_rank)
    } else {
        (field.replace(SEP, "/"), rest.strip_prefix(RANK_MARK)?)
    };
    let object_name = format!("{}@{}", model.0, model.1);
    ObjectKey::parse(&object_name, format).ok()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn names_match_lmcache_fs_and_parse_back() {
        let key = ObjectKey::new("meta-llama/Llama-3", 255, vec![0u8, 1, 2, 3])
            .unwrap()
            .with_salt("u1")
            .unwrap();
        assert_eq!(
            file_name(&key, NameFormat::Seed),
            "meta-llama-SEP-Llama-3@0x000000ff@00010203@u1.data"
        );
        assert_eq!(
            file_name(&key.clone().with_group(2), NameFormat::Grouped),
            "meta-llama-SEP-Llama-3@0x000000ff@2@00010203@u1.data"
        );
        assert_eq!(
            parse_file_name(&file_name(&key, NameFormat::Seed), NameFormat::Seed),
            Some(key)
        );
        assert_eq!(parse_file_name("x.tmp", NameFormat::Seed), None);
        assert_eq!(parse_file_name("..", NameFormat::Seed), None);
    }

    #[test]
    fn models_lmcache_cannot_read_back_are_escaped_and_parse_back() {
        for (model, name) in [
            ("org-SEP-model", "org-SEP-model@~0x00000003@0@0a0b.data"),
            ("a-SEP/b%", "a-SEP%2Fb%25@~0x00000003@0@0a0b.data"),
            ("-SEP-SEP-", "-SEP-SEP-@~0x00000003@0@0a0b.data"),
        ] {
            assert!(!lmcache_round_trips(model), "{model}");
            let key = ObjectKey::new(model, 3, vec![10u8, 11]).unwrap();
            assert_eq!(file_name(&key, NameFormat::Grouped), name);
            assert_eq!(parse_file_name(name, NameFormat::Grouped), Some(key));
        }
        // Names LMCache reads back keep its spelling, '%' and "SEP" included.
        for (model, name) in [
            ("org/model", "org-SEP-model@0x00000003@0@0a0b.data"),
            ("a/SEP-b%41", "a-SEP-SEP-b%41@0x00000003@0@0a0b.data"),
            ("SEP", "SEP@0x00000003@0@0a0b.data"),
        ] {
            assert!(lmcache_round_trips(model), "{model}");
            let key = ObjectKey::new(model, 3, vec![10u8, 11]).unwrap();
            assert_eq!(file_name(&key, NameFormat::Grouped), name);
            assert_eq!(parse_file_name(name, NameFormat::Grouped), Some(key));
        }
    }

    #[test]
    fn spellings_file_name_never_writes_are_rejected() {
        for name in [
            // The escaped spelling of a name LMCache reads back.
            "org%2Fmodel@~0x00000003@0@0a0b.data",
            "plain@~0x00000003@0@0a0b.data",
            // Escapes never written.
            "org-SEP-model%41@~0x00000003@0@0a0b.data",
            "org-SEP-model%2f@~0x00000003@0@0a0b.data",
            "org-SEP-model%@~0x00000003@0@0a0b.data",
            "org-SEP-model%2@~0x00000003@0@0a0b.data",
            // No rank mark.
            "org@00000003@0@0a0b.data",
        ] {
            assert_eq!(parse_file_name(name, NameFormat::Grouped), None, "{name}");
        }
    }

    #[test]
    fn no_key_names_a_path_outside() {
        for model in [
            "..",
            "../../etc",
            "/abs",
            "a/../../b",
            ".",
            "-SEP-/..",
            "%2F..",
        ] {
            let key = ObjectKey::new(model, 0, vec![1u8]).unwrap();
            let name = file_name(&key, NameFormat::Seed);
            assert!(!name.contains('/'), "{name}");
            let p = Path::new("/base").join(&name);
            assert_eq!(p.parent(), Some(Path::new("/base")), "{name}");
            assert_eq!(parse_file_name(&name, NameFormat::Seed), Some(key));
        }
    }
}

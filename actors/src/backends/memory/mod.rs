//! The `memory` backend: objects in a map owned by the backend actor.
//!
//! Stored objects are copied into memory of the storage's own, so a store from host memory
//! ([`crate::buffer::HostRegion`]) never keeps a reference to it after the reply.

mod config;

use bytes::Bytes;

pub use config::MemoryConfig;

use crate::buffer::LoadBuf;
use crate::key::{KeyMap, NameFormat, ObjectKey};
use crate::messages::KeyPage;
use crate::storage::{answer_known, BackendError, Fetched, Io, Removed, Storage};

/// In-process storage. Every operation completes synchronously inside the actor's handler.
#[derive(Debug, Default)]
pub struct MemoryStorage {
    objects: KeyMap<Bytes>,
    format: NameFormat,
}

impl MemoryStorage {
    /// An empty store whose listings use `format` for names and cursors.
    pub fn new(format: NameFormat) -> Self {
        Self {
            objects: KeyMap::default(),
            format,
        }
    }
}

/// Sorts `(name, key, size)` entries and cuts the page after `cursor`; shared by listing backends.
pub(crate) fn page_of(
    mut entries: Vec<(String, ObjectKey, u64)>,
    cursor: Option<&str>,
    limit: usize,
) -> KeyPage {
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let start = cursor.map_or(0, |c| entries.partition_point(|e| e.0.as_str() <= c));
    let rest = &entries[start..];
    let take = rest.len().min(limit);
    KeyPage {
        entries: rest[..take]
            .iter()
            .map(|(_, k, s)| (k.clone(), *s))
            .collect(),
        next: (rest.len() > take).then(|| rest[take - 1].0.clone()),
    }
}

impl Storage for MemoryStorage {
    fn kind(&self) -> &'static str {
        "memory"
    }

    fn put(&mut self, items: Vec<(ObjectKey, Bytes)>) -> Io<Vec<Result<(), BackendError>>> {
        let n = items.len();
        for (k, v) in items {
            self.objects.insert(k, Bytes::copy_from_slice(&v));
        }
        Io::ready(vec![Ok(()); n])
    }

    /// The map has one writer, this actor: the ledger's sizes are the objects' sizes.
    fn head(
        &mut self,
        keys: &[ObjectKey],
        known: &[Option<u64>],
    ) -> Io<Vec<Result<Option<u64>, BackendError>>> {
        answer_known(keys, known, |unknown| {
            Io::ready(
                unknown
                    .iter()
                    .map(|k| Ok(self.objects.get(k).map(|b| b.len() as u64)))
                    .collect(),
            )
        })
    }

    fn get(&mut self, items: Vec<(ObjectKey, LoadBuf)>) -> Io<Vec<Result<Fetched, BackendError>>> {
        Io::ready(
            items
                .into_iter()
                .map(|(k, mut buf)| {
                    Ok(match self.objects.get(&k) {
                        None => Fetched::Absent,
                        Some(b) if b.len() != buf.len() => Fetched::SizeMismatch {
                            actual: b.len() as u64,
                        },
                        Some(b) => {
                            buf.copy_from_slice(b);
                            Fetched::Hit
                        }
                    })
                })
                .collect(),
        )
    }

    fn remove(&mut self, keys: Vec<ObjectKey>) -> Io<Vec<Result<Removed, BackendError>>> {
        Io::ready(
            keys.iter()
                .map(|k| {
                    Ok(match self.objects.remove(k) {
                        Some(_) => Removed::Yes,
                        None => Removed::Absent,
                    })
                })
                .collect(),
        )
    }

    fn list(
        &mut self,
        model: Option<String>,
        cursor: Option<String>,
        limit: usize,
    ) -> Io<Result<KeyPage, BackendError>> {
        let entries = self
            .objects
            .iter()
            .filter(|(k, _)| model.as_deref().is_none_or(|m| k.model_name() == m))
            .map(|(k, v)| (k.object_name(self.format), k.clone(), v.len() as u64))
            .collect();
        Io::ready(Ok(page_of(entries, cursor.as_deref(), limit)))
    }

    fn details(&self) -> serde_json::Value {
        serde_json::json!({ "objects": self.objects.len() })
    }
}

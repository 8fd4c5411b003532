//! `IsolatedLRU`: LMCache's per-cache-salt LRU, driven by per-salt byte quotas.
//!
//! One LRU list per cache salt (`""` for unsalted keys). A round looks at each salt with
//! tracked bytes and its quota (`eviction.quotas`, changed at run time with
//! [`SetQuota`](super::SetQuota)):
//!
//! * a salt whose bytes are `>= trigger_watermark × quota` loses `eviction_ratio` of its keys
//!   (or bytes, with `eviction_unit = "bytes"`), least recently used first; rounds repeat until
//!   it is under `trigger_watermark × quota`;
//! * a salt under that is untouched;
//! * **allowlist rule** (LMCache's `QuotaManager.get_limit_bytes`): a salt without a quota has a
//!   limit of 0, exactly like a quota of 0, and such a salt loses *all* its unlocked keys at the
//!   next cycle. Only salts with a quota keep data; give unsalted keys a quota under `""`.
//!
//! Each salt's victims go in a group of their own, so **a round never touches another salt's
//! keys**, and the adapter's capacity and global watermark play no part (as in LMCache's
//! per-salt branch of its L2 eviction controller). Within a batch, keys are refreshed in
//! reverse request order (the tail goes first), as in `LRU`.

use std::collections::HashMap;

use lru::LruCache;

use super::{ratio_group, EvictionPolicy, Pressure, SizeBook};
use crate::key::{BuildDigestHasher, ObjectKey};
use crate::messages::{DeleteCause, EvictGroup};

type List = LruCache<ObjectKey, (), BuildDigestHasher>;

/// The IsolatedLRU policy. Its settings are the `eviction` table's, quotas included.
#[derive(Default)]
pub(super) struct IsolatedLru {
    per_salt: HashMap<String, List>,
    len: usize,
}

fn salt(key: &ObjectKey) -> &str {
    key.cache_salt().unwrap_or("")
}

impl EvictionPolicy for IsolatedLru {
    fn name(&self) -> &'static str {
        "IsolatedLRU"
    }

    fn on_stored(&mut self, keys: &[ObjectKey]) {
        for key in keys.iter().rev() {
            let list = self
                .per_salt
                .entry(salt(key).to_owned())
                .or_insert_with(|| LruCache::unbounded_with_hasher(BuildDigestHasher::default()));
            if list.put(key.clone(), ()).is_none() {
                self.len += 1;
            }
        }
    }

    fn on_accessed(&mut self, keys: &[ObjectKey]) {
        for key in keys.iter().rev() {
            if let Some(list) = self.per_salt.get_mut(salt(key)) {
                list.promote(key);
            }
        }
    }

    fn on_removed(&mut self, keys: &[ObjectKey], _: DeleteCause) {
        for key in keys {
            let s = salt(key);
            if let Some(list) = self.per_salt.get_mut(s) {
                if list.pop(key).is_some() {
                    self.len -= 1;
                }
                if list.is_empty() {
                    self.per_salt.remove(s);
                }
            }
        }
    }

    fn victims(&self) -> Box<dyn Iterator<Item = &ObjectKey> + '_> {
        let mut salts: Vec<&String> = self.per_salt.keys().collect();
        salts.sort();
        Box::new(
            salts
                .into_iter()
                .flat_map(|s| self.per_salt[s].iter().rev().map(|(k, _)| k)),
        )
    }

    fn len(&self) -> usize {
        self.len
    }

    fn plan(&mut self, pressure: &Pressure<'_>, book: &SizeBook) -> Vec<EvictGroup> {
        let c = pressure.config;
        let mut groups = Vec::new();
        for (s, bytes, _) in book.salts() {
            let Some(list) = self.per_salt.get(s) else {
                continue;
            };
            let limit = c.quotas.get(s).unwrap_or(0);
            if bytes == 0 || (bytes as f64) < c.trigger_watermark * limit as f64 {
                continue;
            }
            let ratio = if limit == 0 { 1.0 } else { c.eviction_ratio };
            let victims = list.iter().rev().map(|(k, _)| k);
            groups.extend(ratio_group(
                victims,
                list.len(),
                bytes,
                ratio,
                c.eviction_unit,
                book,
            ));
        }
        groups
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{EvictionConfig, EvictionPolicy as Name};

    fn key(salt: &str, i: u8) -> ObjectKey {
        ObjectKey::new("m", 0, vec![i])
            .unwrap()
            .with_salt(salt)
            .unwrap()
    }

    fn setup() -> (IsolatedLru, SizeBook) {
        let (mut p, mut book) = (IsolatedLru::default(), SizeBook::default());
        for s in ["a", "b"] {
            let keys: Vec<ObjectKey> = (0..10).map(|i| key(s, i)).collect();
            for k in &keys {
                book.insert(k, 100);
            }
            p.on_stored(&keys);
        }
        (p, book)
    }

    fn plan(p: &mut IsolatedLru, book: &SizeBook, quotas: &[(&str, u64)]) -> Vec<EvictGroup> {
        let mut cfg = EvictionConfig::with_policy(Name::IsolatedLru);
        for (s, q) in quotas {
            cfg.quotas.0.insert(s.to_string(), *q);
        }
        let pressure = Pressure {
            used_bytes: book.total_bytes(),
            capacity_bytes: 0,
            config: &cfg,
        };
        p.plan(&pressure, book)
    }

    #[test]
    fn only_the_salt_over_its_quota_loses_keys() {
        let (mut p, book) = setup();
        // a: 1000 bytes >= 0.8 × 1000; b: 1000 < 0.8 × 2000.
        let g = plan(&mut p, &book, &[("a", 1000), ("b", 2000)]);
        assert_eq!(g.len(), 1);
        assert_eq!(g[0].max_keys, 2, "20 % of a's 10 keys");
        assert!(g[0].candidates.iter().all(|k| k.cache_salt() == Some("a")));
        assert_eq!(
            g[0].candidates[0],
            key("a", 9),
            "the tail of the batch first"
        );
    }

    #[test]
    fn zero_quota_and_no_quota_wipe_the_salt() {
        let (mut p, book) = setup();
        let g = plan(&mut p, &book, &[("a", 0), ("b", 5000)]);
        assert_eq!((g.len(), g[0].max_keys), (1, 10));
        let g = plan(&mut p, &book, &[("b", 5000)]);
        assert_eq!(
            (g.len(), g[0].max_keys),
            (1, 10),
            "allowlist: no quota is 0"
        );
        assert!(g[0].candidates.iter().all(|k| k.cache_salt() == Some("a")));
        assert!(plan(&mut p, &book, &[("a", 5000), ("b", 5000)]).is_empty());
    }
}

//! Where a bucket split over tags keeps each thing: which tag a name belongs to, what each
//! tag is called (and so which cluster slot, and master, holds it), and how a total is split
//! over tags.
//!
//! Invariants (every node computes the same, on every platform, from the bucket's identity,
//! the count and the name alone):
//! - A name's tag is FNV-1a (64 bits) of its bytes modulo the count ([`shard_of`]).
//! - Tag 0 is the bucket's own identity; tag `i` lands in the `i`-th equal range of slots
//!   other than tag 0's ([`shard_identity`]), so a count equal to an evenly split cluster's
//!   masters puts one tag on each.
//! - The parts of a split ([`share`], [`split_bytes`]) add up to the whole.

/// Slots of a Redis or Valkey cluster.
pub(super) const SLOTS: usize = 16384;

/// The cluster slot of `key`, as the server computes it: CRC16 (XMODEM) of its hash tag (what
/// lies between its first `{` and the next `}`, when not empty), else of the whole key.
pub(super) fn key_slot(key: &str) -> usize {
    let tag = key
        .split_once('{')
        .and_then(|(_, rest)| rest.split_once('}'))
        .map(|(tag, _)| tag)
        .filter(|tag| !tag.is_empty())
        .unwrap_or(key);
    crc_fast::checksum(crc_fast::CrcAlgorithm::Crc16Xmodem, tag.as_bytes()) as usize % SLOTS
}

/// The slot of a tag's keys (they share its hash tag; see [`FleetIndex`]'s prefix).
pub(super) fn tag_slot(identity: &str) -> usize {
    key_slot(&format!("kvtier:{{{identity}}}:usage"))
}

/// The identity of tag `shard` of a bucket split over `shards`, the same on every node.
/// Tag 0 is the bucket's own (so one tag is exactly the index before tags were counted, and
/// the count is recorded on the same key whatever it is). The slots are cut into `shards`
/// equal ranges, as a cluster created with `redis-cli --cluster create` cuts them over its
/// masters; tag 0 falls in one of them, and tag `i` ≥ 1 takes the `i`-th of the others:
/// `IDENTITY#i~k`, with the least `k` that puts its slot in the middle half of that range
/// (away from where two masters' ranges meet). So `shards` equal to the masters of such a
/// cluster puts one tag on each master.
pub(crate) fn shard_identity(identity: &str, shard: usize, shards: usize) -> String {
    if shard == 0 {
        return identity.to_string();
    }
    let start = |r: usize| r * SLOTS / shards;
    let first = tag_slot(identity) * shards / SLOTS;
    let range = (0..shards)
        .filter(|&r| r != first)
        .nth(shard - 1)
        .unwrap_or(0);
    let (lo, hi) = (start(range), start(range + 1));
    let (lo, hi) = (lo + (hi - lo) / 4, lo + (hi - lo) * 3 / 4);
    (0..1_000_000)
        .map(|k| format!("{identity}#{shard}~{k}"))
        .find(|id| (lo..hi.max(lo + 1)).contains(&tag_slot(id)))
        .unwrap_or_else(|| format!("{identity}#{shard}"))
}

/// The tag of a name among `shards`: FNV-1a (64 bits) of its bytes, modulo the count.
pub(crate) fn shard_of(name: &str, shards: usize) -> usize {
    if shards == 1 {
        return 0;
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % shards as u64) as usize
}

/// Share `i` of `total` split over `n`: `total / n`, the remainder going to the first ones.
pub(super) fn share(total: u64, i: usize, n: usize) -> u64 {
    let n = n as u64;
    total / n + u64::from((i as u64) < total % n)
}

/// `bytes` split over tags in proportion to `counts` (names per tag), the remainder to the
/// first tag with names: the same split for a write's announcement and its end.
pub(super) fn split_bytes(bytes: u64, counts: &[usize]) -> Vec<u64> {
    let all: usize = counts.iter().sum();
    if all == 0 {
        return vec![0; counts.len()];
    }
    let mut out: Vec<u64> = counts
        .iter()
        .map(|&c| (u128::from(bytes) * c as u128 / all as u128) as u64)
        .collect();
    let rest = bytes - out.iter().sum::<u64>();
    if let Some(first) = counts.iter().position(|&c| c > 0) {
        out[first] += rest;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_split_by_names_add_up_and_repeat() {
        assert_eq!(split_bytes(100, &[1, 0, 2]), vec![34, 0, 66]);
        assert_eq!(split_bytes(7, &[0, 3, 3]), vec![0, 4, 3]);
        assert_eq!(split_bytes(5, &[0, 0]), vec![0, 0]);
        for (total, n) in [(10, 3), (2, 4), (0, 2)] {
            let parts: u64 = (0..n).map(|i| share(total, i, n)).sum();
            assert_eq!(parts, total);
        }
    }

    #[test]
    fn names_spread_over_tags_the_same_way_everywhere() {
        assert_eq!(shard_of("anything", 1), 0);
        // FNV-1a is fixed: these hold on every node and platform.
        let tags: Vec<usize> = (0..64).map(|i| shard_of(&format!("k{i}"), 3)).collect();
        for t in 0..3 {
            let n = tags.iter().filter(|&&x| x == t).count();
            assert!((12..=30).contains(&n), "tag {t} holds {n} of 64");
        }
        assert_eq!(shard_identity("b", 0, 3), "b");
        // Redis' own example slots: `123456789` is 12739, and a hash tag is hashed alone.
        assert_eq!(key_slot("123456789"), 12739);
        assert_eq!(key_slot("a{123456789}b"), 12739);
        assert_eq!(key_slot("a{}b"), key_slot("a{}b"));
        // Tags land one per equal range of slots, each in its range's middle half.
        for shards in [2, 3, 5, 16] {
            let mut ranges: Vec<usize> = (0..shards)
                .map(|t| tag_slot(&shard_identity("s3:h/bucket", t, shards)) * shards / SLOTS)
                .collect();
            ranges.sort_unstable();
            assert_eq!(ranges, (0..shards).collect::<Vec<_>>(), "{shards} tags");
        }
    }
}

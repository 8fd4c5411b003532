//! The fleet index's Lua scripts: each batch is one script, so each is atomic on the server and
//! one round trip. One file per script (`NAME.lua`); the helpers they share come first, in
//! `prelude.lua` (batched reads and writes, usage, the clock, the order), `flru.lua` and
//! `arc.lua` (those orders' state), `index.lua` (objects, locks, claims, writes in flight,
//! reaping, `begin`) and `rounds.lua` (an eviction round).
//! They reach the server as one library of functions (`FUNCTION LOAD` at each join, named
//! `kvtier_HASH` after its text, so two kvtier versions on one server each call their own),
//! called by `FCALL`: the prelude is compiled once per load, not at every call (a prelude-only
//! `EVAL` costs about 8 µs, an empty one under 1 µs). A server without functions (before Redis
//! 7, Valkey 7.2, or one that refuses `FUNCTION`) runs each as prelude + body by `EVALSHA`.
//! Either way a call starts with `begin(ARGV)`: a function keeps the prelude's upvalues from
//! one call to the next, so `begin` sets the prefix and clears the batch state.
//!
//! **Cost.** A script's server calls do not grow with its batch: every helper of the prelude
//! reads and writes a list of names with one variadic command (HMGET, HSET, HDEL, ZADD, ZREM,
//! SADD, SREM, ZMSCORE, SMISMEMBER; in chunks of 1,000), and the per-name work runs in Lua.
//! That per-name Lua (small tables and string keys, about 0.3–0.6 µs each on Redis 7's Lua
//! 5.1) is now most of a request's server CPU, the commands 10–40 % of it
//! (docs/benchmarks.md, "Fleet index load").
//! Applied one name at a time or as a batch, a script leaves the index in the same state: a
//! batch is applied in the order the names would have been, and a name given twice sees its
//! own earlier effect. Two approximations, both bounded by one batch: the capacity in objects
//! (`peak`) that FLRU's priorities and shadows read is the batch's last, and a shadow over its
//! tier drops its lowest once per batch, not once per name.
//!
//! Every script gets `KEYS[1]` = the bucket's usage hash (so a cluster client routes it to the
//! bucket's slot) and `ARGV[1]` = the bucket's key prefix `kvtier:{IDENTITY}:LAYOUT:` (see
//! [`super::LAYOUT`]). The other keys
//! are built from that prefix inside the script; the `{IDENTITY}` hash tag puts all of them in
//! one slot, so the scripts also run on a Redis or Valkey cluster. Times come from the server's
//! `TIME` (milliseconds), never from a node's clock, so nodes with skewed clocks agree on
//! liveness; recency is the fleet's logical clock (`clock`, one tick per store or hit), so
//! every node sees one order of accesses.
//!
//! The keys, under the prefix (see the module docs of [`super`] for the invariants):
//! - `size` (hash): object name → size in bytes; the objects the fleet knows. One more field,
//!   `''` (no object's name: names are never empty), holds 1 KiB of padding, longer than any
//!   value a server keeps in a hash's list form, so the server keeps `size` as a hash table
//!   from its first field (a list it scans under 512 fields: `HMGET` of 25 names in 400 costs
//!   85 µs, in a hash table a few µs; a sorted set, as in layout `v2`, adds a score's
//!   formatting and parsing and a skip-list walk among equal scores per name).
//! - `salt` (hash): object name → cache salt, for salted objects only.
//! - `usage` (hash): `bytes`, `objects`, `salt:SALT` → bytes per cache salt (`salt:` for
//!   unsalted objects), `pending:NODE` → bytes that node is writing (dropped with the
//!   node when it is reaped), and `quota:SALT` → the fleet's `IsolatedLRU` quota of a salt.
//! - `clock` (integer): the fleet's logical clock, one tick per store or lookup hit.
//! - `order` (string): the fleet's eviction order (`lru`, `lru:salts` for `IsolatedLRU`,
//!   `flru:BONUS` or `arc`), written by
//!   each join; `peak` (integer): the most objects the index has known at once (the
//!   capacity in objects of `FLRU` and `ARC`).
//! - `shards` (string, on the bucket's first tag only): the count of hash tags the bucket's
//!   index is split over, recorded by the first join (see `super::shards`).
//! - `recency` (sorted set): object name → its eviction score, lowest first: the tick of its
//!   last store or lookup hit, or under `flru:BONUS` FLRU's priority
//!   (`2^40 + tick + BONUS × peak × (min(uses, 16) − 1)`, a new object placed by the mode);
//!   `srec:SALT` (sorted set): the tick of the last store or hit of the objects of one cache
//!   salt (`srec:` for unsalted ones), from which `IsolatedLRU` rounds take one salt's
//!   victims and a listing tells what was touched. `srec:` is kept under `lru:salts` only:
//!   under `lru` and `arc` `recency` holds the same ticks (a reader of the unsalted ones
//!   skips the salted names), under FLRU each object's record holds its last tick (below);
//!   a join that moves the order to `lru:salts` builds `srec:` (from `recency`'s ticks, or
//!   from FLRU's records), one that moves it away drops it.
//! - `FLRU`: `uses` (hash): object name → its record `USES:FIRST:LAST` (its stores and hits,
//!   and the ticks of its first known and its last use; a rate order and a listing read the
//!   last use there); `hist` and `hist_old` (hashes): the records of forgotten names, in two
//!   generations of `max(4096, 16 × peak)` names, taken back when a name is stored again.
//!   An object stored under another order before FLRU has no record: last used at tick 0.
//!   The shadows (one per mode: `recent`, `demoted`, `last`, `rates_low`, `rates_high`,
//!   numbered 1 to 5): `shN:order` (sorted set: priority), `shN:uses` (records on the
//!   shadows' clock), `shN:hist`, `shN:hist_old` of the names the nodes mark as sampled (one
//!   node's shadows' sample, by key digest), `sh:clock`, `sh:score` (hash: mode number → its
//!   decayed hits) and `sh:queue` (list: sampled names touched since the shadows' last batch;
//!   they see them once a quarter of their tier, at most 32, is waiting, so a shadow holds up
//!   to that many names over its tier between two trims). Under `flru:BONUS:rates` there are
//!   no shadows and the mode is always `rates_low`. Each of these hashes holds `size`'s
//!   padding field `''` from the join or heartbeat that finds the order FLRU (a new `hist`
//!   generation from its start), so none is a list a batch scans: unpadded, under the
//!   server's 512-field list limit, FLRU cost 0.87 ms a request at 2 % (docs/benchmarks.md).
//!   One record per name (layout `v4`; `v3` kept `first`, the shadows' `last` and `srec:`
//!   apart) is about 7 % less server CPU per FLRU request.
//! - `ARC`: `t1`, `t2` (sorted sets, by tick): known objects seen once, and again; `b1`, `b2`
//!   (sorted sets): the ghosts of objects evicted from each, trimmed so `|t1| + |b1| <= peak`
//!   and all four `<= 2 × peak`; `arc_p`: the target size of `t1`.
//! - `held:NODE` (set): the names that node holds locked. The node counts its own locks of
//!   a name (a name locked by two of its lookups is held until both unlock) and the set says
//!   only whether the count is positive: `LOCK` adds the names, and the node's `SREM` (no
//!   script) removes a name when its count reaches 0. A name is locked while it is in the set of
//!   any node in `nodes`; the set goes with its node when the node is reaped.
//! - `deleting` (set): the names claimed for deletion (by any node).
//! - `window` (set): a script's scratch, the names whose locks it checks (see `free_of` in
//!   `index.lua`); created and deleted within one call, so no other call ever sees it.
//! - `claims:NODE` (set): the names a node has claimed and not released.
//! - `epoch` (integer): one tick per announced write (`WRITING` returns it; the node gives it
//!   back with that write's `STORED`). `gone` (sorted set): name → the epoch when a release
//!   last removed it from the store, while a write announced before may be in flight (at most
//!   100,000 names), and a padding member at epoch 0 that keeps the set a skip list from the
//!   start (see `gone_record`); `gone_floor` the highest epoch dropped from it. A write announced at `e` whose name is in
//!   `gone` at `e` or later (the delete came after the announcement, so the write may have
//!   landed before it), or with `e` at or under `gone_floor`, is not added by its `STORED`: a
//!   lookup probes the store instead. So the index never says an object is in the store because
//!   of a write a deletion may have removed, and keeps no per-name record of writes in flight.
//! - `nodes` (sorted set): node id → the server time its liveness lapses.
//! - `seen:NODE` (set): the names a listing of the bucket by that node has seen so far.
//! - `lease` (string, with a TTL): the node running an eviction round (held for the round,
//!   then given up, so the next round runs on whichever node finds the bucket full).
//! - `listing` (string, with a TTL of the listing period): the node that lists the bucket
//!   this period.

use redis::Script;

/// The helpers every script starts with, one Lua chunk in this order (each file uses the ones
/// before it): `prelude.lua`, the prefix `p`, batched reads and writes of hashes and sorted
/// sets, usage, the clock and the order; `flru.lua`, FLRU's records, history and shadows;
/// `arc.lua`, ARC's lists; `index.lua`, touching and forgetting objects, claiming, locking and
/// ending writes, reaping, and `begin(ARGV)`, which starts each call; `rounds.lua`, an eviction
/// round (`run_round`), which `round.lua` runs alone and `stored.lua` after a write's end.
const PRELUDE: &str = concat!(
    include_str!("prelude.lua"),
    "\n",
    include_str!("flru.lua"),
    "\n",
    include_str!("arc.lua"),
    "\n",
    include_str!("index.lua"),
    "\n",
    include_str!("rounds.lua")
);

/// One script in its two forms: a function of the library (`FCALL`, the default: the prelude
/// is compiled once when the library is loaded, not at every call) and a script (`EVALSHA`,
/// for a server without functions, before Redis 7 or Valkey 7.2).
pub(super) struct Func {
    /// The function's name in the library: `kvtier_HASH_NAME`.
    pub(super) function: String,
    /// The prelude, `begin(ARGV)` and the body, as one script.
    pub(super) eval: Script,
}

/// The loaded scripts, and the library that holds them all as functions.
pub(super) struct Scripts {
    pub(super) join: Func,
    pub(super) beat: Func,
    pub(super) stored: Func,
    pub(super) writing: Func,
    pub(super) lock: Func,
    pub(super) quota: Func,
    pub(super) touch: Func,
    pub(super) lease: Func,
    pub(super) lease_release: Func,
    #[cfg(test)]
    pub(super) candidates: Func,
    pub(super) round: Func,
    pub(super) claim: Func,
    pub(super) release: Func,
    pub(super) vanished: Func,
    pub(super) sync_start: Func,
    pub(super) sync_page: Func,
    pub(super) sync_end: Func,
    pub(super) usage: Func,
    /// `FUNCTION LOAD REPLACE` source: the prelude once, then each script as a function.
    /// Its name carries the hash of its text, so nodes of two kvtier versions on one server
    /// each call their own.
    pub(super) library: String,
}

impl Scripts {
    pub(super) fn new() -> Self {
        let bodies: &[(&str, &str)] = &[
            ("join", include_str!("join.lua")),
            ("beat", include_str!("beat.lua")),
            ("stored", include_str!("stored.lua")),
            ("writing", include_str!("writing.lua")),
            ("lock", include_str!("lock.lua")),
            ("quota", include_str!("quota.lua")),
            ("touch", include_str!("touch.lua")),
            ("lease", include_str!("lease.lua")),
            ("lease_release", include_str!("lease_release.lua")),
            ("candidates", include_str!("candidates.lua")),
            ("round", include_str!("round.lua")),
            ("claim", include_str!("claim.lua")),
            ("release", include_str!("release.lua")),
            ("vanished", include_str!("vanished.lua")),
            ("sync_start", include_str!("sync_start.lua")),
            ("sync_page", include_str!("sync_page.lua")),
            ("sync_end", include_str!("sync_end.lua")),
            ("usage", include_str!("usage.lua")),
        ];
        let mut text = String::from(PRELUDE);
        for (name, body) in bodies {
            text.push_str(&format!(
                "\nlocal function f_{name}(KEYS, ARGV)\nbegin(ARGV)\n{body}\nend\n"
            ));
        }
        let hash = Script::new(&text).get_hash()[..12].to_string();
        let mut library = format!("#!lua name=kvtier_{hash}\n{text}");
        for (name, _) in bodies {
            library.push_str(&format!(
                "redis.register_function('kvtier_{hash}_{name}', f_{name})\n"
            ));
        }
        let func = |name: &str| {
            let body = bodies
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, b)| *b)
                .expect("every script is in the list");
            Func {
                function: format!("kvtier_{hash}_{name}"),
                eval: Script::new(&format!("{PRELUDE}\nbegin(ARGV)\n{body}")),
            }
        };
        Self {
            join: func("join"),
            beat: func("beat"),
            stored: func("stored"),
            writing: func("writing"),
            lock: func("lock"),
            quota: func("quota"),
            touch: func("touch"),
            lease: func("lease"),
            lease_release: func("lease_release"),
            #[cfg(test)]
            candidates: func("candidates"),
            round: func("round"),
            claim: func("claim"),
            release: func("release"),
            vanished: func("vanished"),
            sync_start: func("sync_start"),
            sync_page: func("sync_page"),
            sync_end: func("sync_end"),
            usage: func("usage"),
            library,
        }
    }
}

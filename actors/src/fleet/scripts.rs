//! The fleet index's Lua scripts: each batch is one script, so each is atomic on the server and
//! one round trip.
//!
//! Every script gets `KEYS[1]` = the bucket's usage hash (so a cluster client routes it to the
//! bucket's slot) and `ARGV[1]` = the bucket's key prefix `kvtier:{IDENTITY}:`. The other keys
//! are built from that prefix inside the script; the `{IDENTITY}` hash tag puts all of them in
//! one slot, so the scripts also run on a Redis or Valkey cluster. Times come from the server's
//! `TIME` (milliseconds), never from a node's clock, so nodes with skewed clocks agree on
//! liveness; recency is the fleet's logical clock (`clock`, one tick per store or hit), so
//! every node sees one order of accesses.
//!
//! The keys, under the prefix (see the module docs of [`super`] for the invariants):
//! - `size` (hash): object name → size in bytes; the objects the fleet knows.
//! - `salt` (hash): object name → cache salt, for salted objects only.
//! - `usage` (hash): `bytes`, `objects`, `salt:SALT` → bytes per cache salt (`salt:` for
//!   unsalted objects), `pending:NODE` → bytes that node is writing (dropped with the
//!   node when it is reaped), and `quota:SALT` → the fleet's `IsolatedLRU` quota of a salt.
//! - `clock` (integer): the fleet's logical clock, one tick per store or lookup hit.
//! - `order` (string): the fleet's eviction order (`lru`, `flru:BONUS` or `arc`), written by
//!   each join; `peak` (integer): the most objects the index has known at once (the
//!   capacity in objects of `FLRU` and `ARC`).
//! - `recency` (sorted set): object name → its eviction score, lowest first: the tick of its
//!   last store or lookup hit, or under `flru:BONUS` FLRU's priority
//!   (`2^40 + tick + BONUS × peak × (min(uses, 16) − 1)`, a new object placed by the mode);
//!   `srec:SALT` (sorted set): the tick of the last store or hit of the objects of one cache
//!   salt (`srec:` for unsalted ones), from which `IsolatedLRU` rounds take one salt's
//!   victims, a listing tells what was touched, and FLRU's rates read the last use.
//! - `FLRU`: `uses` and `first` (hashes): object name → its uses (stores and hits) and the
//!   tick of its first known use; `hist` and `hist_old` (hashes): `uses:first` of forgotten
//!   names, in two generations of `max(4096, 16 × peak)` names, taken back when a name is
//!   stored again. The shadows (one per mode: `recent`, `demoted`, `last`, `rates_low`,
//!   `rates_high`, numbered 1 to 5): `shN:order` (sorted set: priority), `shN:uses`,
//!   `shN:first`, `shN:last`, `shN:hist`, `shN:hist_old` of the names the nodes mark as
//!   sampled (one node's shadows' sample, by key digest), `sh:clock` and
//!   `sh:score` (hash: mode number → its decayed hits). Under `flru:BONUS:rates` there are no
//!   shadows and the mode is always `rates_low`.
//! - `ARC`: `t1`, `t2` (sorted sets, by tick): known objects seen once, and again; `b1`, `b2`
//!   (sorted sets): the ghosts of objects evicted from each, trimmed so `|t1| + |b1| <= peak`
//!   and all four `<= 2 × peak`; `arc_p`: the target size of `t1`.
//! - `locks` (hash): object name → lock count over every live node.
//! - `held:NODE` (hash): object name → that node's lock count.
//! - `deleting` (hash): object name → the node that claimed its deletion.
//! - `writing` (hash): object name → writes of it in flight over every live node (announced
//!   before the write, ended by the node's next `STORED`); `writes:NODE` (hash) is that node's
//!   share, dropped with the node.
//! - `tainted` (hash): names a deletion removed while a node was writing them: the write may
//!   have landed before the delete, so the writer's `STORED` does not add the object (a lookup
//!   probes the store instead); cleared when the name's last write ends.
//! - `claims:NODE` (set): the names a node has claimed and not released.
//! - `nodes` (sorted set): node id → the server time its liveness lapses.
//! - `seen:NODE` (set): the names a listing of the bucket by that node has seen so far.
//! - `lease` (string, with a TTL): the node running an eviction round (held for the round,
//!   then given up, so the next round runs on whichever node finds the bucket full).
//! - `listing` (string, with a TTL of the listing period): the node that lists the bucket
//!   this period.

use redis::Script;

/// Helpers every script starts with: `p` (the prefix), `now_ms()`, `forget(name)` (remove an
/// object from the index and its usage), `claim(node, name)`, `free(name)` (neither locked nor
/// being deleted), the pending bytes of writes (`pending_add`, `pending_total` of the usage
/// hash, read unless given),
/// `write_ended(name)`, and `reap(now)` (release everything of nodes whose liveness lapsed).
const PRELUDE: &str = r#"
local p = ARGV[1]
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function add_usage(salt, delta, objects)
  redis.call('HINCRBY', p..'usage', 'bytes', delta)
  local n = redis.call('HINCRBY', p..'usage', 'objects', objects)
  if objects > 0 and n > tonumber(redis.call('GET', p..'peak') or '0') then
    redis.call('SET', p..'peak', n)
  end
  if redis.call('HINCRBY', p..'usage', 'salt:'..salt, delta) <= 0 then
    redis.call('HDEL', p..'usage', 'salt:'..salt)
  end
end
local function tick()
  return redis.call('INCR', p..'clock')
end
local kind, bonus, fixed_rates = nil, nil, false
local function order()
  if kind == nil then
    local o = redis.call('GET', p..'order') or 'lru'
    local b, m = string.match(o, '^flru:([^:]+):?(%a*)$')
    if b then
      kind, bonus, fixed_rates = 'flru', tonumber(b), m == 'rates'
    else
      kind = o
    end
  end
  return kind
end
local function peak()
  return math.max(1, tonumber(redis.call('GET', p..'peak') or '1'))
end
-- FLRU, with the rules and constants of crate::eviction's FLRU. A ranking is a key prefix `r`
-- (the bucket's own, `p`, or a shadow's): `r..'uses'` and `r..'first'` (the tick of its first
-- known use) per object it holds, and `uses:first` of objects it dropped in the two
-- generations `r..'hist'` and `r..'hist_old'`.
local BASE = 2 ^ 40
local MODES = {'recent', 'demoted', 'last', 'rates_low', 'rates_high'}
local PRIOR = {rates_low = 0.1, rates_high = 3.0}
local function history_take(r, name)
  local seen = redis.call('HGET', r..'hist', name) or redis.call('HGET', r..'hist_old', name)
  if seen then
    redis.call('HDEL', r..'hist', name)
    redis.call('HDEL', r..'hist_old', name)
    local uses, first = string.match(seen, '^(%d+):?(%d*)$')
    return tonumber(uses), tonumber(first)
  end
  return 0, nil
end
-- One use of `name` in ranking `r` at tick `at`: returns its uses (with those remembered).
-- Its first use is set when it comes into the ranking (from the history, else `at`).
local function use(r, name, at)
  local uses = tonumber(redis.call('HGET', r..'uses', name) or '0')
  if uses == 0 then
    local first
    uses, first = history_take(r, name)
    redis.call('HSET', r..'first', name, first or at)
  end
  uses = math.min(255, uses + 1)
  redis.call('HSET', r..'uses', name, uses)
  return uses
end
-- The tick of a known object's last store or hit (0 for one a listing added).
local function last_use(name)
  local salt = redis.call('HGET', p..'salt', name) or ''
  return tonumber(redis.call('ZSCORE', p..'srec:'..salt, name) or '0')
end
-- `name` left ranking `r`: its uses and first use go to the history, of `limit` names a
-- generation.
local function unuse(r, name, limit)
  local uses = redis.call('HGET', r..'uses', name)
  if uses then
    local first = redis.call('HGET', r..'first', name) or '0'
    redis.call('HDEL', r..'uses', name)
    redis.call('HDEL', r..'first', name)
    if redis.call('HLEN', r..'hist') >= limit then
      redis.call('RENAME', r..'hist', r..'hist_old')
    end
    redis.call('HSET', r..'hist', name, uses..':'..first)
  end
end
-- FLRU's priority of a use at tick `at` in a ranking of `cap` objects, a new object (one use)
-- placed by `mode`: at its touch (`recent`, and the rate modes), one capacity earlier
-- (`demoted`), or below every object used more than once (`last`).
local function priority(at, uses, mode, cap)
  if uses > 1 or mode == 'recent' or PRIOR[mode] then
    return BASE + at + bonus * cap * (math.min(uses, 16) - 1)
  elseif mode == 'demoted' then
    return BASE + at - cap
  end
  return at
end
-- FLRU's rate score (the lower, the sooner it goes) at tick `clock`.
local function rate_score(uses, first, last, clock, cap, prior)
  local rate = (uses - 1 + prior) / (clock - first + 2 * cap)
  return rate * math.exp(-(clock - last) * rate / 0.7)
end
-- The names of the `n` lowest of `scored` ({score, last use, name}), lowest first.
local function lowest(scored, n)
  table.sort(scored, function(x, y)
    if x[1] ~= y[1] then return x[1] < y[1] end
    if x[2] ~= y[2] then return x[2] < y[2] end
    return x[3] < y[3]
  end)
  local out = {}
  for i = 1, math.min(n, #scored) do out[i] = scored[i][3] end
  return out
end
-- The shadows: one ranking per mode of the names the nodes mark as sampled (one in 16: the keys
-- one node's shadows sample, by their digest, which only nodes can compute), in a tier of
-- `peak / 16` objects, each with its hits decayed over 8 of its tier-fulls
-- (`sh:score`), on one clock of their own (`sh:clock`).
local function shadows_touch(name)
  local cap = math.max(1, math.floor(peak() / 16))
  local clock = redis.call('INCR', p..'sh:clock')
  local keep = 1 - 1 / (8 * cap)
  local limit = math.max(16 * cap, 256)
  local scores = redis.call('HMGET', p..'sh:score', 1, 2, 3, 4, 5)
  for i, mode in ipairs(MODES) do
    local r = p..'sh'..i..':'
    local hit = redis.call('ZSCORE', r..'order', name) ~= false
    local uses = use(r, name, clock)
    redis.call('ZADD', r..'order', priority(clock, uses, mode, cap), name)
    redis.call('HSET', r..'last', name, clock)
    redis.call('HSET', p..'sh:score', i, tonumber(scores[i] or '0') * keep + (hit and 1 or 0))
    local n = redis.call('ZCARD', r..'order')
    if n > cap then
      local gone
      if PRIOR[mode] then
        local scored = {}
        for _, s in ipairs(redis.call('ZRANGE', r..'order', 0, -1)) do
          local last = tonumber(redis.call('HGET', r..'last', s))
          local u, f = tonumber(redis.call('HGET', r..'uses', s)), tonumber(redis.call('HGET', r..'first', s))
          scored[#scored + 1] = {rate_score(u, f, last, clock, cap, PRIOR[mode]), last, s}
        end
        gone = lowest(scored, n - cap + math.floor(cap / 128))
      else
        gone = redis.call('ZRANGE', r..'order', 0, n - cap - 1)
      end
      for _, s in ipairs(gone) do
        redis.call('ZREM', r..'order', s)
        redis.call('HDEL', r..'last', s)
        unuse(r, s, limit)
      end
    end
  end
end
-- The bucket's FLRU mode for this script (a batch's new objects are all placed alike): the
-- rate order with the low prior for `flru:BONUS:rates`; else LRU placement unless another
-- shadow has 5 % more recent hits, then the best shadow's.
local mode_now = nil
local function flru_mode()
  if mode_now == nil then
    mode_now = 'rates_low'
    if not fixed_rates then
      local s = redis.call('HMGET', p..'sh:score', 1, 2, 3, 4, 5)
      local lru = tonumber(s[1] or '0')
      local best, top = 1, lru
      for i = 2, #MODES do
        local v = tonumber(s[i] or '0')
        if v > lru * 1.05 and v > top then best, top = i, v end
      end
      mode_now = MODES[best]
    end
  end
  return mode_now
end
local function arc_trim()
  local c = peak()
  local t1, b1 = redis.call('ZCARD', p..'t1'), redis.call('ZCARD', p..'b1')
  if t1 + b1 > c and b1 > 0 then
    redis.call('ZPOPMIN', p..'b1', math.min(b1, t1 + b1 - c))
  end
  local all = redis.call('ZCARD', p..'t1') + redis.call('ZCARD', p..'t2')
    + redis.call('ZCARD', p..'b1') + redis.call('ZCARD', p..'b2')
  if all > 2 * c then
    local popped = #redis.call('ZPOPMIN', p..'b2', all - 2 * c) / 2
    if all - 2 * c > popped then redis.call('ZPOPMIN', p..'b1', all - 2 * c - popped) end
  end
end
local function arc_refresh(name, at, used)
  if redis.call('ZSCORE', p..'t2', name) or (used and redis.call('ZREM', p..'t1', name) == 1) then
    redis.call('ZADD', p..'t2', at, name)
  elseif not used then
    redis.call('ZADD', p..'t1', at, name)
  else
    local b1, b2 = redis.call('ZCARD', p..'b1'), redis.call('ZCARD', p..'b2')
    local target = tonumber(redis.call('GET', p..'arc_p') or '0')
    if redis.call('ZREM', p..'b1', name) == 1 then
      redis.call('SET', p..'arc_p', math.min(peak(), target + math.max(1, b2 / b1)))
      redis.call('ZADD', p..'t2', at, name)
    elseif redis.call('ZREM', p..'b2', name) == 1 then
      redis.call('SET', p..'arc_p', math.max(0, target - math.max(1, b1 / b2)))
      redis.call('ZADD', p..'t2', at, name)
    else
      redis.call('ZADD', p..'t1', at, name)
    end
    arc_trim()
  end
end
local function refresh(name, salt, at, used, sampled)
  local score = at
  if order() == 'flru' and used then
    score = priority(at, use(p, name, at), flru_mode(), peak())
    if not fixed_rates and sampled then
      shadows_touch(name)
    end
  elseif order() == 'arc' then
    arc_refresh(name, at, used)
  end
  redis.call('ZADD', p..'recency', score, name)
  redis.call('ZADD', p..'srec:'..salt, at, name)
end
-- Drops an object's ARC lists; one its round evicted leaves a ghost of the list it was in.
local function arc_forget(name, evicted)
  local in_t1 = redis.call('ZREM', p..'t1', name) == 1
  local in_t2 = redis.call('ZREM', p..'t2', name) == 1
  if evicted and (in_t1 or in_t2) then
    redis.call('ZADD', p..(in_t1 and 'b1' or 'b2'), redis.call('GET', p..'clock') or 0, name)
    arc_trim()
  else
    redis.call('ZREM', p..'b1', name)
    redis.call('ZREM', p..'b2', name)
  end
end
local function forget(name, evicted)
  if order() == 'arc' then arc_forget(name, evicted) end
  local size = redis.call('HGET', p..'size', name)
  if size then
    local salt = redis.call('HGET', p..'salt', name) or ''
    redis.call('HDEL', p..'size', name)
    redis.call('HDEL', p..'salt', name)
    add_usage(salt, -tonumber(size), -1)
    redis.call('ZREM', p..'srec:'..salt, name)
  end
  redis.call('ZREM', p..'recency', name)
  unuse(p, name, math.max(4096, 16 * peak()))
end
local function claim(node, name)
  redis.call('HSET', p..'deleting', name, node)
  redis.call('SADD', p..'claims:'..node, name)
end
local function free(name)
  return redis.call('HEXISTS', p..'locks', name) == 0 and redis.call('HEXISTS', p..'deleting', name) == 0
end
local function pending_add(node, delta)
  if delta ~= 0 and redis.call('HINCRBY', p..'usage', 'pending:'..node, delta) <= 0 then
    redis.call('HDEL', p..'usage', 'pending:'..node)
  end
end
local function pending_total(u)
  local total = 0
  u = u or redis.call('HGETALL', p..'usage')
  for i = 1, #u, 2 do
    if string.sub(u[i], 1, 8) == 'pending:' then total = total + math.max(0, tonumber(u[i + 1])) end
  end
  return total
end
local function write_ended(name)
  if redis.call('HINCRBY', p..'writing', name, -1) <= 0 then
    redis.call('HDEL', p..'writing', name)
    redis.call('HDEL', p..'tainted', name)
  end
end
local function drop_node(node)
  local held = redis.call('HGETALL', p..'held:'..node)
  for i = 1, #held, 2 do
    if redis.call('HINCRBY', p..'locks', held[i], -tonumber(held[i + 1])) <= 0 then
      redis.call('HDEL', p..'locks', held[i])
    end
  end
  redis.call('DEL', p..'held:'..node)
  for _, name in ipairs(redis.call('SMEMBERS', p..'claims:'..node)) do
    redis.call('HDEL', p..'deleting', name)
  end
  redis.call('DEL', p..'claims:'..node)
  redis.call('HDEL', p..'usage', 'pending:'..node)
  local writes = redis.call('HGETALL', p..'writes:'..node)
  for i = 1, #writes, 2 do
    for _ = 1, tonumber(writes[i + 1]) do write_ended(writes[i]) end
  end
  redis.call('DEL', p..'writes:'..node)
  for _, lease in ipairs({'lease', 'listing'}) do
    if redis.call('GET', p..lease) == node then
      redis.call('DEL', p..lease)
    end
  end
end
local function reap(now)
  local dead = redis.call('ZRANGEBYSCORE', p..'nodes', '-inf', now)
  for _, node in ipairs(dead) do
    drop_node(node)
    redis.call('ZREM', p..'nodes', node)
  end
  return #dead
end
"#;

/// The script sources after the prelude.
const JOIN: &str = r#"
-- ARGV: p, node, ttl_ms, fresh, order, quotas. A process's first join (`fresh` = 1) drops what
-- an earlier process with its id held; a join again after a lost connection keeps what this
-- process holds (its locks are still its own; if it was reaped meanwhile, they are gone
-- already). `order` (`lru`, `flru:BONUS` or `arc`; empty for a node that does not evict)
-- becomes the fleet's eviction order: the last evicting node to join decides. Returns
-- {live nodes, the order before}.
local node, ttl = ARGV[2], tonumber(ARGV[3])
local now = now_ms()
if ARGV[4] == '1' then drop_node(node) end
local before = redis.call('GET', p..'order') or ARGV[5]
if ARGV[5] ~= '' then redis.call('SET', p..'order', ARGV[5]) end
-- Then (salt, limit) pairs: this node's configured IsolatedLRU quotas, for salts the fleet
-- has none for yet (a quota set at run time, by any node, stays).
for i = 6, #ARGV, 2 do
  redis.call('HSETNX', p..'usage', 'quota:'..ARGV[i], ARGV[i + 1])
end
redis.call('ZADD', p..'nodes', now + ttl, node)
reap(now)
return {redis.call('ZCARD', p..'nodes'), before}
"#;

const BEAT: &str = r#"
-- ARGV: p, node, ttl_ms. Returns the number of live nodes, or -1 when this node had lapsed
-- (it was reaped: its locks are gone, and it must join again).
local node, ttl = ARGV[2], tonumber(ARGV[3])
local now = now_ms()
reap(now)
if redis.call('ZSCORE', p..'nodes', node) == false then
  return -1
end
redis.call('ZADD', p..'nodes', now + ttl, node)
return redis.call('ZCARD', p..'nodes')
"#;

const STORED: &str = r#"
-- ARGV: p, node, written, ended_bytes, n_ended, n_ended names, then (name, salt, size,
-- sampled) per object (`sampled` = 1: FLRU's shadows sample it). The objects are now in the
-- store: this node's writes (`written` = 1) or objects a probe found (0). The ended names and
-- bytes end this node's writes announced by WRITING (written or failed). A written object
-- whose name a deletion tainted meanwhile is not added. Returns the usage hash. Objects are
-- touched last first, so the first of a batch (a request's first chunk) is the most recent,
-- as on one node.
local node, written, n = ARGV[2], ARGV[3] == '1', tonumber(ARGV[5])
pending_add(node, -tonumber(ARGV[4]))
for i = #ARGV - 3, 6 + n, -4 do
  local name, salt, size, sampled = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3] == '1'
  if not (written and redis.call('HEXISTS', p..'tainted', name) == 1) then
    local old = tonumber(redis.call('HGET', p..'size', name) or '0')
    local old_salt = redis.call('HGET', p..'salt', name) or ''
    if old > 0 then
      add_usage(old_salt, -old, -1)
      redis.call('ZREM', p..'srec:'..old_salt, name)
    end
    redis.call('HSET', p..'size', name, size)
    if salt ~= '' then redis.call('HSET', p..'salt', name, salt) else redis.call('HDEL', p..'salt', name) end
    add_usage(salt, size, 1)
    refresh(name, salt, tick(), true, sampled)
  end
end
for i = 6, 6 + n - 1 do
  local name = ARGV[i]
  local mine = redis.call('HINCRBY', p..'writes:'..node, name, -1)
  if mine <= 0 then redis.call('HDEL', p..'writes:'..node, name) end
  if mine >= 0 then write_ended(name) end
end
return redis.call('HGETALL', p..'usage')
"#;

const WRITING: &str = r#"
-- ARGV: p, node, bytes, limit, names: this node starts writing these objects, `bytes` in all
-- (counted by eviction rounds until STORED ends them, or until the node is reaped). With a
-- `limit` (> 0), only if the bucket's footprint stays within it: the bytes of the objects the
-- index knows (claimed ones too: the bucket holds them until deleted), plus the bytes live
-- nodes are writing, plus these; else nothing is recorded. Returns {1 (started) or 0 (full),
-- then the usage hash}.
local node, bytes, limit = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local out, started = nil, 1
if limit > 0 then
  out = redis.call('HGETALL', p..'usage')
  local known = tonumber(redis.call('HGET', p..'usage', 'bytes') or '0')
  if known + pending_total(out) + bytes > limit then started = 0 end
end
if started == 1 then
  pending_add(node, bytes)
  for i = 5, #ARGV do
    redis.call('HINCRBY', p..'writing', ARGV[i], 1)
    redis.call('HINCRBY', p..'writes:'..node, ARGV[i], 1)
  end
  out = redis.call('HGETALL', p..'usage')
end
table.insert(out, 1, started)
return out
"#;

const QUOTA: &str = r#"
-- ARGV: p, salt[, limit]. Sets the fleet's IsolatedLRU quota of a salt (removes it without a
-- limit: the salt then falls under the allowlist rule, limit 0). Returns the previous limit,
-- or -1 when there was none.
local field = 'quota:'..ARGV[2]
local old = tonumber(redis.call('HGET', p..'usage', field) or '-1')
if ARGV[3] then redis.call('HSET', p..'usage', field, ARGV[3]) else redis.call('HDEL', p..'usage', field) end
return old
"#;

const LOCK: &str = r#"
-- ARGV: p, node, then (name, sampled) per name. Per name: -1 (being deleted: not locked), else
-- locked and the size the index knows (0: unknown, the node must probe the store). A known
-- name's recency is refreshed, last name first (the first is the most recent, as on one node).
local node = ARGV[2]
local out = {}
for i = #ARGV - 1, 3, -2 do
  local name, at = ARGV[i], (i - 1) / 2
  if redis.call('HEXISTS', p..'deleting', name) == 1 then
    out[at] = -1
  else
    redis.call('HINCRBY', p..'locks', name, 1)
    redis.call('HINCRBY', p..'held:'..node, name, 1)
    local size = redis.call('HGET', p..'size', name)
    if size then
      refresh(name, redis.call('HGET', p..'salt', name) or '', tick(), true, ARGV[i + 1] == '1')
      out[at] = tonumber(size)
    else
      out[at] = 0
    end
  end
end
return out
"#;

const UNLOCK: &str = r#"
-- ARGV: p, node, names. A name this node does not hold (reaped, or never locked) is ignored.
local node = ARGV[2]
for i = 3, #ARGV do
  local name = ARGV[i]
  local mine = redis.call('HINCRBY', p..'held:'..node, name, -1)
  if mine <= 0 then redis.call('HDEL', p..'held:'..node, name) end
  if mine >= 0 then
    if redis.call('HINCRBY', p..'locks', name, -1) <= 0 then
      redis.call('HDEL', p..'locks', name)
    end
  end
end
return 0
"#;

const TOUCH: &str = r#"
-- ARGV: p, then (name, sampled) per name. Refreshes the recency of the names the index knows,
-- last first.
for i = #ARGV - 1, 2, -2 do
  if redis.call('HEXISTS', p..'size', ARGV[i]) == 1 then
    refresh(ARGV[i], redis.call('HGET', p..'salt', ARGV[i]) or '', tick(), true, ARGV[i + 1] == '1')
  end
end
return 0
"#;

const LEASE: &str = r#"
-- ARGV: p, node, ttl_ms, lease (`lease`: eviction; `listing`: the bucket listing). 1 when this
-- node holds the lease (taken or renewed for ttl_ms), else 0.
local node, ttl, key = ARGV[2], tonumber(ARGV[3]), p..ARGV[4]
local holder = redis.call('GET', key)
if holder == false then
  redis.call('SET', key, node, 'PX', ttl)
  return 1
elseif holder == node then
  redis.call('PEXPIRE', key, ttl)
  return 1
end
return 0
"#;

const LEASE_RELEASE: &str = r#"
-- ARGV: p, node, lease. Gives the lease up if this node holds it.
if redis.call('GET', p..ARGV[3]) == ARGV[2] then
  redis.call('DEL', p..ARGV[3])
end
return 0
"#;

#[cfg(test)]
const CANDIDATES: &str = r#"
-- ARGV: p, limit, scan. The first `limit` names by fleet recency, oldest first, among the
-- `scan` oldest, that no node locks and none is deleting; as name, size pairs.
local limit, scan = tonumber(ARGV[2]), tonumber(ARGV[3])
local out = {}
for _, name in ipairs(redis.call('ZRANGE', p..'recency', 0, scan - 1)) do
  if #out >= 2 * limit then break end
  if free(name) then
    out[#out + 1] = name
    out[#out + 1] = redis.call('HGET', p..'size', name) or '0'
  end
end
return out
"#;

const ROUND: &str = r#"
-- ARGV: p, node, ttl_ms, capacity, watermark, ratio, policy (`per_salt`: IsolatedLRU, below;
-- else by capacity), ahead, catch_up, waiting. Starts an eviction round, atomically.
-- `stored` is the objects the index knows less those claimed for deletion (rounds in flight);
-- `landing` adds the bytes live nodes are writing and the bytes this node waits to write
-- (`waiting`: WRITING found the bucket full for them). When `stored` is under
-- `watermark x capacity` and `landing` under `ahead x capacity`: returns {0}. When another node
-- holds the eviction lease: {-1}. Else takes (or renews) the lease for ttl_ms and claims the
-- round's victims, the least recent names no node locks or deletes (among the
-- 4 x limit + 64 least recent): when `stored` reached the watermark, LMCache's
-- `floor(objects x ratio)`, and with `catch_up` = 1 (`eviction_unit = "bytes"`) at least down
-- to `watermark x capacity x (1 - ratio)`, as one node's round (crate::eviction's
-- global_round); and at least what brings `landing` back under `ahead x capacity`; at least
-- 1. Returns {1, name, size, ...}.
local node, ttl = ARGV[2], tonumber(ARGV[3])
local capacity, watermark, ratio = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local catch_up = ARGV[9] == '1'
-- A round's count when `stored` (of `n` objects, `average` bytes each) reached `mark`.
local function due_count(n, stored, mark, average)
  local limit = math.floor(n * ratio)
  if catch_up then
    limit = math.max(limit, math.ceil((stored - mark * (1 - ratio)) / average))
  end
  return limit
end
-- Claims `name` for this round: into `out` with its size.
local function victim(name, out)
  claim(node, name)
  out[#out + 1] = name
  out[#out + 1] = redis.call('HGET', p..'size', name) or '0'
end
local function take(set, limit, skip, out)
  local taken = 0
  for _, name in ipairs(redis.call('ZRANGE', set, 0, 4 * limit + 63 + skip)) do
    if taken >= limit then break end
    if free(name) then
      victim(name, out)
      taken = taken + 1
    end
  end
end
-- ARC (LMCache's rule): from T1 while its size, less what rounds in flight claimed from it,
-- is at least the target `arc_p`, else from T2; the other list when one runs out.
local function arc_take(limit, deleting, out)
  local window = 4 * limit + 63 + #deleting
  local lists = {redis.call('ZRANGE', p..'t1', 0, window), redis.call('ZRANGE', p..'t2', 0, window)}
  local at = {1, 1}
  local t1 = redis.call('ZCARD', p..'t1')
  for _, name in ipairs(deleting) do
    if redis.call('ZSCORE', p..'t1', name) then t1 = t1 - 1 end
  end
  local target = math.floor(math.min(tonumber(redis.call('GET', p..'arc_p') or '0'), peak()))
  local function next_free(l)
    local list = lists[l]
    while at[l] <= #list do
      local name = list[at[l]]
      at[l] = at[l] + 1
      if free(name) then return name end
    end
    return nil
  end
  for _ = 1, limit do
    local name = nil
    if t1 >= target then name = next_free(1) end
    if name then t1 = t1 - 1 else name = next_free(2) end
    if not name then
      name = next_free(1)
      if name then t1 = t1 - 1 end
    end
    if not name then break end
    victim(name, out)
    limit = limit - 1
  end
  -- Objects in neither list (stored while the fleet had another order) go by recency.
  if limit > 0 then take(p..'recency', limit, #deleting, out) end
end
-- FLRU's rate order: the free objects with the lowest rate scores (an object a listing added,
-- with no uses, as used once at its tick 0). As on one node (crate::eviction's FLRU,
-- RATE_REFRESH and RATE_ORDER_EXTRA), scoring every object is not done per round: `rates`
-- (a list) keeps the `peak / 16 + 64` lowest names as of the tick in `rates_at` (with the
-- prior), recomputed once `peak / 64` ticks have passed or the list runs out; a round takes
-- the names still known, free and not touched since.
local function rates_fill(prior, clock)
  local cap = peak()
  local scored = {}
  for _, name in ipairs(redis.call('HKEYS', p..'size')) do
    if free(name) then
      local last = last_use(name)
      local uses = tonumber(redis.call('HGET', p..'uses', name) or '1')
      local first = tonumber(redis.call('HGET', p..'first', name) or last)
      scored[#scored + 1] = {rate_score(uses, first, last, clock, cap, prior), last, name}
    end
  end
  redis.call('DEL', p..'rates')
  local names = lowest(scored, math.floor(cap / 16) + 64)
  for i = 1, #names, 1000 do
    redis.call('RPUSH', p..'rates', unpack(names, i, math.min(#names, i + 999)))
  end
  redis.call('SET', p..'rates_at', clock..':'..prior)
  return #names
end
local function rates_take(limit, prior, out)
  local clock = tonumber(redis.call('GET', p..'clock') or '0')
  local at, was = string.match(redis.call('GET', p..'rates_at') or '', '^(%d+):(.*)$')
  at = tonumber(at)
  if at == nil or tonumber(was) ~= prior or clock - at > peak() / 64 then
    rates_fill(prior, clock)
    at = clock
  end
  local taken = 0
  while taken < limit do
    local name = redis.call('LPOP', p..'rates')
    if not name then
      -- Run out: score again (everything in a list scored now can be taken).
      if rates_fill(prior, clock) == 0 then break end
      at = clock
      name = redis.call('LPOP', p..'rates')
    end
    if redis.call('HEXISTS', p..'size', name) == 1 and last_use(name) <= at and free(name) then
      victim(name, out)
      taken = taken + 1
    end
  end
end
if ARGV[7] == 'per_salt' then
  -- IsolatedLRU: each salt against its own quota (none: 0, LMCache's allowlist rule); a
  -- round takes victims of the salts due only, from each salt's own recency.
  local u = redis.call('HGETALL', p..'usage')
  local bytes, quota = {}, {}
  for i = 1, #u, 2 do
    local f = u[i]
    if string.sub(f, 1, 5) == 'salt:' then bytes[string.sub(f, 6)] = tonumber(u[i + 1]) end
    if string.sub(f, 1, 6) == 'quota:' then quota[string.sub(f, 7)] = tonumber(u[i + 1]) end
  end
  local claimed, claimed_n = {}, {}
  for _, name in ipairs(redis.call('HKEYS', p..'deleting')) do
    local salt = redis.call('HGET', p..'salt', name) or ''
    claimed[salt] = (claimed[salt] or 0) + tonumber(redis.call('HGET', p..'size', name) or '0')
    claimed_n[salt] = (claimed_n[salt] or 0) + 1
  end
  local due = {}
  for salt, b in pairs(bytes) do
    local stored, mark = b - (claimed[salt] or 0), watermark * (quota[salt] or 0)
    if stored > 0 and stored >= mark then due[#due + 1] = {salt, stored, mark, b} end
  end
  if #due == 0 then return {0} end
  local holder = redis.call('GET', p..'lease')
  if holder and holder ~= node then return {-1} end
  redis.call('SET', p..'lease', node, 'PX', ttl)
  table.sort(due, function(x, y) return x[1] < y[1] end)
  local out = {1}
  for _, d in ipairs(due) do
    local salt, stored, mark, b = d[1], d[2], d[3], d[4]
    local n = redis.call('ZCARD', p..'srec:'..salt)
    local average = b / math.max(1, n)
    local skip = claimed_n[salt] or 0
    -- A salt without a quota (limit 0) loses all of it (ratio 1, as on one node).
    local limit = n - skip
    if mark > 0 then limit = due_count(n - skip, stored, mark, average) end
    take(p..'srec:'..salt, math.max(1, limit), skip, out)
  end
  return out
end
local known = tonumber(redis.call('HGET', p..'usage', 'bytes') or '0')
local objects = tonumber(redis.call('HGET', p..'usage', 'objects') or '0')
local claimed = 0
local deleting = redis.call('HKEYS', p..'deleting')
for _, name in ipairs(deleting) do
  claimed = claimed + tonumber(redis.call('HGET', p..'size', name) or '0')
end
local stored = known - claimed
local landing = stored + pending_total() + tonumber(ARGV[10])
local mark, ahead = watermark * capacity, tonumber(ARGV[8]) * capacity
if capacity <= 0 or (stored < mark and landing < ahead) then return {0} end
local holder = redis.call('GET', p..'lease')
if holder and holder ~= node then return {-1} end
redis.call('SET', p..'lease', node, 'PX', ttl)
local average = 1
if known > 0 and objects > 0 then average = known / objects end
local limit = 0
if stored >= mark then
  limit = due_count(objects - #deleting, stored, mark, average)
end
if landing >= ahead then
  limit = math.max(limit, math.ceil((landing - ahead) / average))
end
local out = {1}
if order() == 'arc' then
  arc_take(math.max(1, limit), deleting, out)
elseif order() == 'flru' and PRIOR[flru_mode()] then
  rates_take(math.max(1, limit), PRIOR[flru_mode()], out)
else
  take(p..'recency', math.max(1, limit), #deleting, out)
end
return out
"#;

const CLAIM: &str = r#"
-- ARGV: p, node, names. Claims the deletion of each name no node locks and none is deleting;
-- returns the names claimed. Until released, lookups do not lock them.
local node = ARGV[2]
local out = {}
for i = 3, #ARGV do
  local name = ARGV[i]
  if free(name) then
    claim(node, name)
    out[#out + 1] = name
  end
end
return out
"#;

const RELEASE: &str = r#"
-- ARGV: p, node, evicted, n_removed, then n_removed names the node deleted from the store,
-- then names it kept. A removed name is forgotten (`evicted` = 1: by an eviction round, so ARC
-- keeps its ghost); if a node is writing it, it is tainted (that write may have landed before
-- the delete: its STORED will not add it, and a lookup probes the store).
-- Returns the usage hash.
local node, evicted, n = ARGV[2], ARGV[3] == '1', tonumber(ARGV[4])
for i = 5, #ARGV do
  local name = ARGV[i]
  if redis.call('SREM', p..'claims:'..node, name) == 1 then
    redis.call('HDEL', p..'deleting', name)
    if i < 5 + n then
      forget(name, evicted)
      if redis.call('HEXISTS', p..'writing', name) == 1 then
        redis.call('HSET', p..'tainted', name, 1)
      end
    end
  end
end
return redis.call('HGETALL', p..'usage')
"#;

const VANISHED: &str = r#"
-- ARGV: p, names: objects a node found missing from the store. Returns the usage hash.
for i = 2, #ARGV do
  if redis.call('HEXISTS', p..'deleting', ARGV[i]) == 0 then forget(ARGV[i], false) end
end
return redis.call('HGETALL', p..'usage')
"#;

const SYNC_START: &str = r#"
-- ARGV: p, node. Starts a listing of the bucket: clears this node's seen set; returns the
-- clock now (objects stored or hit after it are never swept by this listing).
redis.call('DEL', p..'seen:'..ARGV[2])
return tonumber(redis.call('GET', p..'clock') or '0')
"#;

const SYNC_PAGE: &str = r#"
-- ARGV: p, node, then (name, salt, size, sampled) per listed object (as STORED's; a listing
-- is not a use, so `sampled` is not read). Marks each seen; adds those the
-- index does not know (least recent: tick 0) unless a node is deleting them. Returns the
-- number added.
local node = ARGV[2]
local added = 0
for i = 3, #ARGV, 4 do
  local name, salt, size = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  redis.call('SADD', p..'seen:'..node, name)
  if redis.call('HEXISTS', p..'size', name) == 0 and redis.call('HEXISTS', p..'deleting', name) == 0 then
    redis.call('HSET', p..'size', name, size)
    if salt ~= '' then redis.call('HSET', p..'salt', name, salt) end
    add_usage(salt, size, 1)
    refresh(name, salt, 0, false)
    added = added + 1
  end
end
return added
"#;

const SYNC_END: &str = r#"
-- ARGV: p, node, start tick. Forgets the objects the listing did not see, unless stored or hit
-- since it started, locked, or being deleted. Returns the usage hash.
local node, start = ARGV[2], tonumber(ARGV[3])
for _, name in ipairs(redis.call('HKEYS', p..'size')) do
  local salt = redis.call('HGET', p..'salt', name) or ''
  if redis.call('SISMEMBER', p..'seen:'..node, name) == 0
      and tonumber(redis.call('ZSCORE', p..'srec:'..salt, name) or '0') <= start
      and redis.call('HEXISTS', p..'locks', name) == 0
      and redis.call('HEXISTS', p..'deleting', name) == 0 then
    forget(name, false)
  end
end
redis.call('DEL', p..'seen:'..node)
return redis.call('HGETALL', p..'usage')
"#;

const USAGE: &str = r#"
-- ARGV: p. The usage hash.
return redis.call('HGETALL', p..'usage')
"#;

/// The loaded scripts (each hashed once; `EVALSHA` with a fallback to `EVAL`).
pub(super) struct Scripts {
    pub(super) join: Script,
    pub(super) beat: Script,
    pub(super) stored: Script,
    pub(super) writing: Script,
    pub(super) lock: Script,
    pub(super) quota: Script,
    pub(super) unlock: Script,
    pub(super) touch: Script,
    pub(super) lease: Script,
    pub(super) lease_release: Script,
    #[cfg(test)]
    pub(super) candidates: Script,
    pub(super) round: Script,
    pub(super) claim: Script,
    pub(super) release: Script,
    pub(super) vanished: Script,
    pub(super) sync_start: Script,
    pub(super) sync_page: Script,
    pub(super) sync_end: Script,
    pub(super) usage: Script,
}

impl Scripts {
    pub(super) fn new() -> Self {
        let s = |body: &str| Script::new(&format!("{PRELUDE}{body}"));
        Self {
            join: s(JOIN),
            beat: s(BEAT),
            stored: s(STORED),
            writing: s(WRITING),
            lock: s(LOCK),
            quota: s(QUOTA),
            unlock: s(UNLOCK),
            touch: s(TOUCH),
            lease: s(LEASE),
            lease_release: s(LEASE_RELEASE),
            #[cfg(test)]
            candidates: s(CANDIDATES),
            round: s(ROUND),
            claim: s(CLAIM),
            release: s(RELEASE),
            vanished: s(VANISHED),
            sync_start: s(SYNC_START),
            sync_page: s(SYNC_PAGE),
            sync_end: s(SYNC_END),
            usage: s(USAGE),
        }
    }
}

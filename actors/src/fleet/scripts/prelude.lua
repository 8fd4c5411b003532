-- The helpers every script starts with (see mod.rs for the keys and the calling convention).
--
-- Cost: every helper that takes a list makes a constant number of server calls for the whole
-- list (HMGET, variadic HSET/HDEL/ZADD/ZREM/SADD/SREM, ZMSCORE, SMISMEMBER), in chunks of
-- CHUNK items, and does the per-name work in Lua, so a batch of n names costs O(1) calls and
-- O(n) items, not O(n) calls; the per-name Lua tables are what a batch costs most (mod.rs).
-- Results match the one-name-at-a-time order exactly: a batch is applied in the order the
-- script would have applied its names, and a name that appears twice sees its own earlier
-- effect (each helper keeps what it has written in a Lua table before it sends it).
local p
local CHUNK = 1000

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- `cmd key items...` in chunks of CHUNK items (`step` items per entry: 2 for pairs); the
-- replies of a command that answers per item (HMGET, ZMSCORE, SMISMEMBER), concatenated
-- (one chunk: the reply itself, not copied).
local function call_chunked(cmd, key, items, step)
  local n, i = #items, 1
  local size = CHUNK * (step or 1)
  if n <= size then
    if n == 0 then return {} end
    local r = redis.call(cmd, key, unpack(items))
    if type(r) == 'table' then return r end
    return {}
  end
  local out = {}
  while i <= n do
    local j = math.min(n, i + size - 1)
    local r = redis.call(cmd, key, unpack(items, i, j))
    if type(r) == 'table' then
      for k = 1, #r do out[#out + 1] = r[k] end
    end
    i = j + 1
  end
  return out
end

-- `names` -> a table name -> value of hash `key` (false when absent).
local function hmget(key, names)
  local out = {}
  if #names == 0 then return out end
  local vals = call_chunked('HMGET', key, names)
  for i, name in ipairs(names) do out[name] = vals[i] end
  return out
end

-- The distinct names of a list, first occurrence first.
local function distinct(names)
  local seen, out = {}, {}
  for _, name in ipairs(names) do
    if not seen[name] then
      seen[name] = true
      out[#out + 1] = name
    end
  end
  return out
end

-- `names` grouped by salt (`salt`: name -> its salt, false or absent for none): the salts in
-- the order first met, and salt -> its names in order.
local function group_by_salt(names, salt)
  local order_, groups = {}, {}
  for _, name in ipairs(names) do
    local s = salt[name] or ''
    if groups[s] == nil then
      groups[s] = {}
      order_[#order_ + 1] = s
    end
    groups[s][#groups[s] + 1] = name
  end
  return order_, groups
end

local function zadd_pairs(key, pairs)
  if #pairs > 0 then call_chunked('ZADD', key, pairs, 2) end
end

local function zrem_all(key, names)
  if #names > 0 then call_chunked('ZREM', key, names) end
end

-- The `size` hash (object name -> size) holds one more field, `''` (no object's name), with a
-- value longer than any server keeps in a hash's list form (`hash-max-listpack-value`, 64 by
-- default): the server then keeps the hash as a hash table from its first field on, where a
-- lookup is a few hundred ns whatever the bucket holds (as a list, under 512 fields, it scans
-- it: 85 us for 25 names in 400; a sorted set costs a score's formatting and parsing and a
-- walk of a skip list of equal scores per name; docs/benchmarks.md). `hashes_ready` puts it
-- there (each join and heartbeat; a hash table is never turned back into a list), and pads
-- FLRU's hashes alike under FLRU (`uses`, `hist` and each shadow's, which a batch
-- reads and writes by name; a new `hist` generation is padded when it starts), so that no
-- read or write of a batch scans a list whatever the bucket or the server's limits.
local PAD = nil
local function padding()
  PAD = PAD or string.rep('-', 1024)
  return PAD
end
local FLRU_RANKINGS = {'', 'sh1:', 'sh2:', 'sh3:', 'sh4:', 'sh5:'}
local function hashes_ready()
  redis.call('HSETNX', p..'size', '', padding())
  local o = redis.call('GET', p..'order') or ''
  if string.sub(o, 1, 5) == 'flru:' then
    -- Under `flru:BONUS:rates` there are no shadows.
    local rankings = string.match(o, ':rates$') and 1 or #FLRU_RANKINGS
    for i = 1, rankings do
      local r = FLRU_RANKINGS[i]
      for _, h in ipairs({'uses', 'hist'}) do redis.call('HSETNX', p..r..h, '', padding()) end
    end
  end
end
-- The sizes the index knows of `names`, by position (false: unknown).
local function sizes_of(names)
  if #names == 0 then return {} end
  return call_chunked('HMGET', p..'size', names)
end
-- Records sizes: (name, size) pairs.
local function sizes_set(pairs)
  if #pairs > 0 then call_chunked('HSET', p..'size', pairs, 2) end
end
-- Every name the index knows.
local function known_names()
  local out = {}
  for _, name in ipairs(redis.call('HKEYS', p..'size')) do
    if name ~= '' then out[#out + 1] = name end
  end
  return out
end
-- Values by position (`vals[i]` of `names[i]`) as name -> value.
local function by_name(names, vals)
  local out = {}
  for i, name in ipairs(names) do out[name] = vals[i] end
  return out
end
-- The sizes as name -> size (false: unknown).
local function size_map(names)
  return by_name(names, sizes_of(names))
end
-- The salts of `names`, by position (false or absent: none); no read while no object has one.
local function salts_of(names)
  if #names == 0 or redis.call('EXISTS', p..'salt') == 0 then return {} end
  return call_chunked('HMGET', p..'salt', names)
end
-- Whether a node is deleting each of `names`, by position (true, or false/absent); no read
-- while none is.
local function deleting_of(names)
  local out = {}
  if #names == 0 or redis.call('EXISTS', p..'deleting') == 0 then return out end
  local r = call_chunked('SMISMEMBER', p..'deleting', names)
  for i = 1, #names do out[i] = r[i] == 1 end
  return out
end

-- Usage, as the batch changes it: `usage_start()` reads the object count (for the peak),
-- `usage_add(salt, delta, objects)` adds in Lua, `usage_flush()` writes the sums in one
-- HINCRBY per field. `peak_now()` is the most objects known at once, as it would be after
-- the changes so far, one by one.
local u_bytes, u_objects, u_salts, u_salt_order = 0, 0, {}, {}
local u_count, u_peak = nil, nil
local function peak_read()
  if u_peak == nil then
    u_peak = tonumber(redis.call('GET', p..'peak') or '0')
    u_count = tonumber(redis.call('HGET', p..'usage', 'objects') or '0')
  end
end
local u_peak_start = nil
local function usage_add(salt, delta, objects)
  peak_read()
  if u_peak_start == nil then u_peak_start = u_peak end
  u_bytes = u_bytes + delta
  u_objects = u_objects + objects
  u_count = u_count + objects
  if objects > 0 and u_count > u_peak then u_peak = u_count end
  if u_salts[salt] == nil then
    u_salts[salt] = 0
    u_salt_order[#u_salt_order + 1] = salt
  end
  u_salts[salt] = u_salts[salt] + delta
end
local function usage_flush()
  if u_bytes ~= 0 or u_objects ~= 0 then
    redis.call('HINCRBY', p..'usage', 'bytes', u_bytes)
    redis.call('HINCRBY', p..'usage', 'objects', u_objects)
  end
  for _, salt in ipairs(u_salt_order) do
    local d = u_salts[salt]
    if d ~= 0 and redis.call('HINCRBY', p..'usage', 'salt:'..salt, d) <= 0 then
      redis.call('HDEL', p..'usage', 'salt:'..salt)
    end
  end
  if u_peak ~= nil and u_peak_start ~= nil and u_peak > u_peak_start then
    redis.call('SET', p..'peak', u_peak)
  end
  u_bytes, u_objects, u_salts, u_salt_order = 0, 0, {}, {}
  u_peak_start = nil
end

-- `n` ticks of the fleet's clock: returns the first (the others follow it).
local function ticks(n)
  return redis.call('INCRBY', p..'clock', n) - n + 1
end

-- The fleet's order (`order`): `lru` (plain LRU), `lru:salts` (IsolatedLRU: LRU whose rounds
-- take each salt's victims from its own recency), `flru:BONUS[:rates]` or `arc`; `order()`
-- gives its kind (`lru`, `flru` or `arc`).
local kind, bonus, fixed_rates, ticked_recency = nil, nil, false, false
local function order()
  if kind == nil then
    local o = redis.call('GET', p..'order') or 'lru'
    local b, m = string.match(o, '^flru:([^:]+):?(%a*)$')
    ticked_recency = o == 'lru' or o == 'arc'
    if b then
      kind, bonus, fixed_rates = 'flru', tonumber(b), m == 'rates'
    elseif o == 'lru:salts' then
      kind = 'lru'
    else
      kind = o
    end
  end
  return kind
end
-- The key of a salt's recency (tick of each object's last store or hit): `srec:SALT`. The
-- unsalted objects' (`srec:`) is kept under `lru:salts` only, whose rounds read it: under
-- `lru` and `arc` `recency` holds the same ticks (with the salted objects too, which a reader
-- of the unsalted ones skips), so this returns `recency` and true for `''` there; under FLRU
-- each object's record in `uses` holds its last tick (see `last_of`). `join.lua` builds
-- `srec:` when the order changes to `lru:salts`.
local function srec_key(s)
  order()
  if s == '' and ticked_recency then return p..'recency', true end
  return p..'srec:'..s, false
end
-- Whether `srec:SALT` is kept (see `srec_key`).
local function srec_kept(s)
  return s ~= '' or order() == 'lru' and not ticked_recency
end
local function peak()
  peak_read()
  return math.max(1, u_peak)
end

-- FLRU, with the rules and constants of crate::eviction's FLRU. A ranking is a key prefix `r`
-- (the bucket's own, `p`, or a shadow's): `r..'uses'`, the record `USES:FIRST:LAST` of each
-- object it holds (its uses, the ticks of its first known and its last use), and the records
-- of objects it dropped in the two generations `r..'hist'` and `r..'hist_old'`.
local BASE = 2 ^ 40
local MODES = {'recent', 'demoted', 'last', 'rates_low', 'rates_high'}
local PRIOR = {rates_low = 0.1, rates_high = 3.0}

-- A ranking's record of a name, `USES:FIRST:LAST` (its uses, the ticks of its first and last
-- known use; the history keeps the same string): uses, first, last (nil when absent).
local function record_of(v)
  if not v then return nil end
  local a, b, c = string.match(v, '^(%d+):(%d+):(%d+)$')
  return tonumber(a), tonumber(b), tonumber(c)
end

-- One use of each name of `names` in ranking `r`, at the ticks `ats` (same positions), in
-- order: returns the uses of each (position -> uses, with those remembered), and the names
-- the ranking held before (name -> true). A name's first use is set when it comes into the
-- ranking (from the history, else its tick); its last use is its last tick here.
local function use_all(r, names, ats)
  local d = distinct(names)
  local rec = hmget(r..'uses', d)
  local fresh, held = {}, {}
  for _, name in ipairs(d) do
    if rec[name] then
      held[name] = true
    else
      fresh[#fresh + 1] = name
    end
  end
  local hist, old = hmget(r..'hist', fresh), hmget(r..'hist_old', fresh)
  -- Taken back from the history: only the names it had.
  local in_hist, in_old = {}, {}
  for _, name in ipairs(fresh) do
    if hist[name] then in_hist[#in_hist + 1] = name end
    if old[name] then in_old[#in_old + 1] = name end
  end
  if #in_hist > 0 then call_chunked('HDEL', r..'hist', in_hist) end
  if #in_old > 0 then call_chunked('HDEL', r..'hist_old', in_old) end
  local count, first, last, out = {}, {}, {}, {}
  for i, name in ipairs(names) do
    if count[name] == nil then
      local n, f = record_of(rec[name] or hist[name] or old[name])
      count[name], first[name] = n or 0, f or ats[i]
    end
    count[name] = math.min(255, count[name] + 1)
    last[name] = ats[i]
    out[i] = count[name]
  end
  local recs = {}
  for _, name in ipairs(d) do
    recs[#recs + 1] = name
    recs[#recs + 1] = count[name]..':'..first[name]..':'..last[name]
  end
  call_chunked('HSET', r..'uses', recs, 2)
  return out, held
end

-- `names` (distinct) left ranking `r`: their records go to the history, of `limit` names a
-- generation.
local function unuse_all(r, names, limit)
  local rec = hmget(r..'uses', names)
  local gone = {}
  for _, name in ipairs(names) do
    if rec[name] then gone[#gone + 1] = name end
  end
  if #gone == 0 then return end
  call_chunked('HDEL', r..'uses', gone)
  -- A generation's count includes its padding field (see `hashes_ready`).
  local n = redis.call('HLEN', r..'hist')
  local pending = {}
  for _, name in ipairs(gone) do
    if n >= limit then
      if #pending > 0 then call_chunked('HSET', r..'hist', pending, 2) end
      pending = {}
      redis.call('RENAME', r..'hist', r..'hist_old')
      redis.call('HSET', r..'hist', '', padding())
      n = 1
    end
    pending[#pending + 1] = name
    pending[#pending + 1] = rec[name]
    n = n + 1
  end
  if #pending > 0 then call_chunked('HSET', r..'hist', pending, 2) end
end

-- The tick of each of `names`' last store or hit (0 for one a listing added, or one stored
-- under another order before FLRU): name -> tick.
local function last_of(names)
  local out = {}
  if #names == 0 then return out end
  if order() == 'flru' then
    local recs = call_chunked('HMGET', p..'uses', names)
    for i, name in ipairs(names) do
      local _, _, l = record_of(recs[i])
      out[name] = l or 0
    end
    return out
  end
  local salt = salts_of(names)
  local by_name = {}
  for i, name in ipairs(names) do by_name[name] = salt[i] end
  local salt_order, by_salt = group_by_salt(names, by_name)
  for _, s in ipairs(salt_order) do
    local l = by_salt[s]
    local scores = call_chunked('ZMSCORE', srec_key(s), l)
    for i, name in ipairs(l) do out[name] = tonumber(scores[i] or '0') end
  end
  return out
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
-- The names of the `n` lowest scores, lowest first, ties by the last use, then the name:
-- `score`, `last` and `name` by position (parallel lists, no table per object). The scores
-- alone are sorted first (a plain number sort, no Lua comparison per pair) for the `n`-th
-- lowest; only the names at or under it are then ordered in full.
local function lowest(score, last, name, n)
  local m = #score
  if n <= 0 or m == 0 then return {} end
  local idx = {}
  if n < m then
    local sorted = {}
    for i = 1, m do sorted[i] = score[i] end
    table.sort(sorted)
    local top = sorted[n]
    for i = 1, m do
      if score[i] <= top then idx[#idx + 1] = i end
    end
  else
    for i = 1, m do idx[i] = i end
  end
  table.sort(idx, function(x, y)
    if score[x] ~= score[y] then return score[x] < score[y] end
    if last[x] ~= last[y] then return last[x] < last[y] end
    return name[x] < name[y]
  end)
  local out = {}
  for i = 1, math.min(n, #idx) do out[i] = name[idx[i]] end
  return out
end

-- The shadows' tier, and the sampled names they see in one batch, at least (a quarter of
-- their tier, at most 32): a batch's names wait in `sh:queue` (a list), so a shadow holds up
-- to that many names over its tier between two trims.
local function shadow_cap()
  return math.max(1, math.floor(peak() / 16))
end
local function shadow_batch()
  return math.max(1, math.min(32, math.ceil(shadow_cap() / 4)))
end

-- The shadows: one ranking per mode of the names the nodes mark as sampled (one in 16: the keys
-- one node's shadows sample, by their digest, which only nodes can compute), in a tier of
-- `peak / 16` objects, each with its hits decayed over 8 of its tier-fulls (`sh:score`), on
-- one clock of their own (`sh:clock`). `names`: the batch's sampled names, in the order they
-- are touched; a shadow over its tier after the batch drops its lowest.
local function shadows_touch(names)
  if #names == 0 then return end
  local cap = shadow_cap()
  local clock0 = redis.call('INCRBY', p..'sh:clock', #names) - #names
  local keep = 1 - 1 / (8 * cap)
  local limit = math.max(16 * cap, 256)
  local scores = redis.call('HMGET', p..'sh:score', 1, 2, 3, 4, 5)
  local ats = {}
  for i = 1, #names do ats[i] = clock0 + i end
  local new_scores = {}
  for m, mode in ipairs(MODES) do
    local r = p..'sh'..m..':'
    -- A shadow holds a name in `order` exactly while it holds its uses.
    local uses, in_order = use_all(r, names, ats)
    local score = tonumber(scores[m] or '0')
    local pairs_ = {}
    for i, name in ipairs(names) do
      score = score * keep + (in_order[name] and 1 or 0)
      in_order[name] = true
      pairs_[#pairs_ + 1] = priority(ats[i], uses[i], mode, cap)
      pairs_[#pairs_ + 1] = name
    end
    new_scores[#new_scores + 1] = m
    new_scores[#new_scores + 1] = score
    zadd_pairs(r..'order', pairs_)
    local n = redis.call('ZCARD', r..'order')
    if n > cap then
      local gone
      local clock = ats[#ats]
      if PRIOR[mode] then
        local all = redis.call('ZRANGE', r..'order', 0, -1)
        local recs = call_chunked('HMGET', r..'uses', all)
        local score, ls = {}, {}
        for i = 1, #all do
          local u, f, l = record_of(recs[i])
          ls[i] = l
          score[i] = rate_score(u, f, l, clock, cap, PRIOR[mode])
        end
        gone = lowest(score, ls, all, n - cap + math.floor(cap / 128))
      else
        gone = redis.call('ZRANGE', r..'order', 0, n - cap - 1)
      end
      zrem_all(r..'order', gone)
      unuse_all(r, gone, limit)
    end
  end
  redis.call('HSET', p..'sh:score', unpack(new_scores))
end

-- Queues a batch's sampled names for the shadows, in order; once `shadow_batch` are waiting,
-- the shadows see them all.
local function shadows_queue(names)
  if #names == 0 then return end
  local waiting = 0
  for i = 1, #names, CHUNK do
    waiting = redis.call('RPUSH', p..'sh:queue', unpack(names, i, math.min(#names, i + CHUNK - 1)))
  end
  if waiting < shadow_batch() then return end
  local all = redis.call('LRANGE', p..'sh:queue', 0, -1)
  redis.call('DEL', p..'sh:queue')
  shadows_touch(all)
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
-- ARC's lists for a batch, as one name at a time would leave them, with the lists read once
-- and written once: `arc_load(names)` reads which list each name is in and the lists' sizes,
-- the batch's changes are made in Lua, and `arc_store()` writes them. One approximation,
-- bounded by the batch: the ghosts a trim drops are dropped after the batch (the lowest then;
-- a ghost that a trim dropped before a later name of the batch hit it counts as hit).
local arc = nil
local function arc_load(names)
  local d = distinct(names)
  local lists = {}
  for _, l in ipairs({'t1', 't2', 'b1', 'b2'}) do
    local sc = call_chunked('ZMSCORE', p..l, d)
    for i, name in ipairs(d) do
      if sc[i] then
        lists[name] = lists[name] or {}
        lists[name][l] = true
      end
    end
  end
  local target = tonumber(redis.call('GET', p..'arc_p') or '0')
  arc = {
    lists = lists,
    n = {t1 = redis.call('ZCARD', p..'t1'), t2 = redis.call('ZCARD', p..'t2'),
         b1 = redis.call('ZCARD', p..'b1'), b2 = redis.call('ZCARD', p..'b2')},
    target = target,
    target_was = target,
    add = {t1 = {}, t2 = {}, b1 = {}, b2 = {}},
    pop = {b1 = 0, b2 = 0},
  }
end
-- `name` joins list `l` at score `at` (a list it was not in counts one more).
local function arc_add(name, l, at)
  local in_ = arc.lists[name] or {}
  arc.lists[name] = in_
  if not in_[l] then arc.n[l] = arc.n[l] + 1 end
  in_[l] = true
  arc.add[l][name] = at
end
-- `name` leaves list `l`; true when it was in it.
local function arc_drop(name, l)
  local in_ = arc.lists[name]
  if not (in_ and in_[l]) then return false end
  in_[l] = false
  arc.n[l] = arc.n[l] - 1
  arc.add[l][name] = false
  return true
end
local function arc_trim()
  local c, n = peak(), arc.n
  if n.t1 + n.b1 > c and n.b1 > 0 then
    local k = math.min(n.b1, n.t1 + n.b1 - c)
    arc.pop.b1, n.b1 = arc.pop.b1 + k, n.b1 - k
  end
  local all = n.t1 + n.t2 + n.b1 + n.b2
  if all > 2 * c then
    local k = math.min(n.b2, all - 2 * c)
    arc.pop.b2, n.b2 = arc.pop.b2 + k, n.b2 - k
    local rest = math.min(n.b1, all - 2 * c - k)
    arc.pop.b1, n.b1 = arc.pop.b1 + rest, n.b1 - rest
  end
end
-- ARC's lists for one name touched at `at` (`used`: a store or hit; else a listing's add).
local function arc_refresh(name, at, used)
  local in_ = arc.lists[name] or {}
  if in_.t2 or (used and in_.t1) then
    arc_drop(name, 't1')
    arc_add(name, 't2', at)
  elseif not used then
    arc_add(name, 't1', at)
  else
    local b1, b2 = arc.n.b1, arc.n.b2
    if arc_drop(name, 'b1') then
      arc.target = math.min(peak(), arc.target + math.max(1, b2 / b1))
      arc_add(name, 't2', at)
    elseif arc_drop(name, 'b2') then
      arc.target = math.max(0, arc.target - math.max(1, b1 / b2))
      arc_add(name, 't2', at)
    else
      arc_add(name, 't1', at)
    end
    arc_trim()
  end
end
-- Drops an object's ARC lists; one its round evicted leaves a ghost of the list it was in, at
-- tick `clock`.
local function arc_forget(name, evicted, clock)
  local in_t1, in_t2 = arc_drop(name, 't1'), arc_drop(name, 't2')
  if evicted and (in_t1 or in_t2) then
    arc_add(name, in_t1 and 'b1' or 'b2', clock)
    arc_trim()
  else
    arc_drop(name, 'b1')
    arc_drop(name, 'b2')
  end
end
-- Writes the batch's changes to ARC's lists: each name leaves the lists it left and joins the
-- ones it joined at its last score, then the trims' ghosts go (the lowest of each).
local function arc_store()
  for _, l in ipairs({'t1', 't2', 'b1', 'b2'}) do
    local gone, pairs_ = {}, {}
    for name, at in pairs(arc.add[l]) do
      if at then
        pairs_[#pairs_ + 1] = at
        pairs_[#pairs_ + 1] = name
      else
        gone[#gone + 1] = name
      end
    end
    zrem_all(p..l, gone)
    zadd_pairs(p..l, pairs_)
  end
  for _, l in ipairs({'b1', 'b2'}) do
    if arc.pop[l] > 0 then redis.call('ZPOPMIN', p..l, arc.pop[l]) end
  end
  if arc.target ~= arc.target_was then redis.call('SET', p..'arc_p', arc.target) end
  arc = nil
end

-- Touches a batch of known objects, in order: `names` (positions 1..n) with their `salts` and
-- whether FLRU's shadows sample each (`sampled`), at the ticks `t0`, `t0 + 1`, ... (`t0` = 0:
-- all at tick 0, as a listing adds them); `used`: a store or hit (else a listing's add). The
-- bucket's recency gets each one's score by the order (LRU: its tick; FLRU: its priority,
-- with a use counted when `used`; ARC: its tick, and its lists), and its salt's recency its
-- tick. FLRU's shadows see the sampled names that are used.
local function refresh_all(names, salts, t0, used, sampled)
  local n = #names
  if n == 0 then return end
  local o = order()
  local ticked = {}
  for i = 1, n do
    ticked[2 * i - 1] = t0 > 0 and t0 + i - 1 or 0
    ticked[2 * i] = names[i]
  end
  local rec = ticked
  if o == 'flru' and used then
    local ats = {}
    for i = 1, n do ats[i] = ticked[2 * i - 1] end
    local mode, cap = flru_mode(), peak()
    local uses = use_all(p, names, ats)
    rec = {}
    for i = 1, n do
      rec[2 * i - 1] = priority(ats[i], uses[i], mode, cap)
      rec[2 * i] = names[i]
    end
    if not fixed_rates then
      local s = {}
      for i = 1, n do
        if sampled[i] then s[#s + 1] = names[i] end
      end
      shadows_queue(s)
    end
  elseif o == 'arc' then
    arc_load(names)
    for i = 1, n do arc_refresh(names[i], ticked[2 * i - 1], used) end
    arc_store()
  end
  zadd_pairs(p..'recency', rec)
  local first, one = salts[1], true
  for i = 2, n do
    if salts[i] ~= first then
      one = false
      break
    end
  end
  if one then
    if srec_kept(first) then zadd_pairs(p..'srec:'..first, ticked) end
    return
  end
  local by_salt, salt_order = {}, {}
  for i = 1, n do
    local s = salts[i]
    local l = by_salt[s]
    if l == nil then
      l = {}
      by_salt[s] = l
      salt_order[#salt_order + 1] = s
    end
    l[#l + 1] = ticked[2 * i - 1]
    l[#l + 1] = names[i]
  end
  for _, s in ipairs(salt_order) do
    if srec_kept(s) then zadd_pairs(p..'srec:'..s, by_salt[s]) end
  end
end


-- Removes objects from the index and its usage (`evicted`: by an eviction round, so ARC
-- keeps their ghosts), in order: `names` distinct, `size` their sizes by position as just
-- read (false: unknown to the index).
local function forget_distinct(names, size, evicted)
  if #names == 0 then return end
  local o = order()
  if o == 'arc' then
    local clock = redis.call('GET', p..'clock') or 0
    arc_load(names)
    for _, name in ipairs(names) do arc_forget(name, evicted, clock) end
    arc_store()
  end
  if redis.call('EXISTS', p..'salt') == 0 then
    -- No object has a salt: the same, in one pass.
    local held, nh, bytes = {}, 0, 0
    for i = 1, #names do
      local s = size[i]
      if s then
        nh = nh + 1
        held[nh] = names[i]
        bytes = bytes + tonumber(s)
      end
    end
    if nh > 0 then usage_add('', -bytes, -nh) end
    if nh > 0 then call_chunked('HDEL', p..'size', held) end
    if srec_kept('') then zrem_all(p..'srec:', held) end
    zrem_all(p..'recency', names)
    if o == 'flru' then unuse_all(p, names, math.max(4096, 16 * peak())) end
    return
  end
  local salt = salts_of(names)
  local known, salted, salts = {}, {}, {}
  for i, name in ipairs(names) do
    if size[i] then
      known[#known + 1] = name
      local s = salt[i] or ''
      salts[name] = s
      if s ~= '' then salted[#salted + 1] = name end
      usage_add(s, -tonumber(size[i]), -1)
    end
  end
  if #known > 0 then call_chunked('HDEL', p..'size', known) end
  if #salted > 0 then call_chunked('HDEL', p..'salt', salted) end
  local salt_order, by_salt = group_by_salt(known, salts)
  for _, s in ipairs(salt_order) do
    if srec_kept(s) then zrem_all(p..'srec:'..s, by_salt[s]) end
  end
  zrem_all(p..'recency', names)
  if o == 'flru' then unuse_all(p, names, math.max(4096, 16 * peak())) end
end
-- The same for any list of names: a name given twice is forgotten once. `known`: name -> size
-- as the caller has just read it (else read here).
local function forget_all(names, evicted, known)
  names = distinct(names)
  local size
  if known then
    size = {}
    for i, name in ipairs(names) do size[i] = known[name] end
  else
    size = sizes_of(names)
  end
  forget_distinct(names, size, evicted)
end

-- The nodes the index lists (live, or lapsed and not reaped yet: their locks still hold).
local function listed_nodes()
  return redis.call('ZRANGE', p..'nodes', 0, -1)
end

-- Names no node locks and none is deleting, of `names`: name -> true. A node's locks are the
-- set `held:NODE` (the node counts its own locks of a name and adds or removes the name when
-- its count leaves or reaches 0), so a name is locked when it is in any node's set.
local function free_of(names)
  local out = {}
  if #names == 0 then return out end
  -- The names being deleted first (one read), then the others' locks, node by node.
  local deleting = deleting_of(names)
  local cand = {}
  for i = 1, #names do
    if not deleting[i] then cand[#cand + 1] = names[i] end
  end
  if #cand == 0 then return out end
  local taken = {}
  for _, node in ipairs(listed_nodes()) do
    local key = p..'held:'..node
    if redis.call('EXISTS', key) == 1 then
      local r = call_chunked('SMISMEMBER', key, cand)
      for i = 1, #cand do
        if r[i] == 1 then taken[i] = true end
      end
    end
  end
  for i, name in ipairs(cand) do
    if not taken[i] then out[name] = true end
  end
  return out
end

-- The usage field `claimed` is the bytes of the names in `deleting`, at their sizes now (a
-- claimed name's size changes only by a STORED, which keeps the sum).
local function claimed_add(bytes)
  if bytes ~= 0 and redis.call('HINCRBY', p..'usage', 'claimed', bytes) <= 0 then
    redis.call('HDEL', p..'usage', 'claimed')
  end
end
-- The sum of sizes (by position; false: 0).
local function sum_of(sizes)
  local bytes = 0
  for i = 1, #sizes do
    if sizes[i] then bytes = bytes + tonumber(sizes[i]) end
  end
  return bytes
end
-- Claims the deletion of `names` (distinct, free) for `node`: they join `deleting` and the
-- node's `claims:NODE`. Returns their sizes by position (false: unknown to the index).
local function claim_all(node, names)
  if #names == 0 then return {} end
  local size = sizes_of(names)
  call_chunked('SADD', p..'deleting', names)
  call_chunked('SADD', p..'claims:'..node, names)
  claimed_add(sum_of(size))
  return size
end
-- Ends `node`'s claims of `names` (distinct, ones it holds), before any is forgotten; `sizes`:
-- their sizes by position, as just read (else read here).
local function unclaim_all(node, names, sizes)
  if #names == 0 then return end
  claimed_add(-sum_of(sizes or sizes_of(names)))
  call_chunked('SREM', p..'claims:'..node, names)
  call_chunked('SREM', p..'deleting', names)
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

-- Stores racing deletions, by epoch: each announced write takes the next `epoch` and is in
-- flight in `inflight` (sorted set: `NODE:EPOCH` -> epoch) until its STORED. A release
-- records each name it removed in `gone` with the epoch then, while any write is in flight
-- (with none, no later STORED can be of a write announced before it). A write announced at
-- `e` whose name is in `gone` at `e` or later may have landed before that delete, so its
-- STORED does not add it. `gone` keeps what a write in flight may need: the names removed
-- since the oldest announcement in flight, and at most GONE_KEEP of them (the oldest go
-- first; `gone_floor` is the highest epoch dropped so, and a write announced at or before it
-- is not added at all: it cannot be told apart; a lookup probes the store for it). A write
-- made without an announcement (epoch 0: the index was unreachable then, or its reply was
-- lost) is never added.
-- `gone` holds one more member, at epoch 0: a name longer than any server keeps in a sorted
-- set's list form (`zset-max-listpack-value`), so the server keeps `gone` as a skip list and a
-- hash table from the start (as a list, under 128 members, each of a release's names is
-- inserted by a scan of it; docs/benchmarks.md). Epochs start at 1, so trimming by epoch
-- never drops it.
local GONE_KEEP = 100000
local function gone_record(names)
  if #names == 0 then return end
  local key = p..'gone'
  local oldest = redis.call('ZRANGE', p..'inflight', 0, 0, 'WITHSCORES')
  if #oldest == 0 then
    redis.call('ZREMRANGEBYSCORE', key, '(0', '+inf')
    return
  end
  if redis.call('EXISTS', key) == 0 then redis.call('ZADD', key, 0, string.rep('-', 1024)) end
  redis.call('ZREMRANGEBYSCORE', key, '(0', '('..oldest[2])
  local e = tonumber(redis.call('GET', p..'epoch') or '0')
  local pairs_ = {}
  for i, name in ipairs(names) do
    pairs_[2 * i - 1], pairs_[2 * i] = e, name
  end
  call_chunked('ZADD', key, pairs_, 2)
  local n = redis.call('ZCARD', key) - 1
  if n > GONE_KEEP then
    -- The oldest names (ranks 1 to cut; rank 0 is the pad).
    local cut = n - GONE_KEEP
    local last = redis.call('ZRANGE', key, cut, cut, 'WITHSCORES')
    redis.call('ZREMRANGEBYRANK', key, 1, cut)
    redis.call('SET', p..'gone_floor', last[2])
  end
end
-- Of `names` (written by a write announced at epoch `e`), by position: true for those a
-- deletion may have removed since (see above).
local function gone_since(names, e)
  local out = {}
  if #names == 0 then return out end
  if e <= tonumber(redis.call('GET', p..'gone_floor') or '0') then
    for i = 1, #names do out[i] = true end
    return out
  end
  if redis.call('ZCARD', p..'gone') <= 1 then return out end
  local g = call_chunked('ZMSCORE', p..'gone', names)
  for i = 1, #names do out[i] = g[i] ~= false and tonumber(g[i]) >= e end
  return out
end
-- `node`'s writes announced at these epochs are no longer in flight.
local function writes_ended(node, epochs)
  if #epochs == 0 then return end
  local members = {}
  for i, e in ipairs(epochs) do members[i] = node..':'..e end
  call_chunked('ZREM', p..'inflight', members)
end

local function drop_node(node)
  redis.call('DEL', p..'held:'..node)
  local mine, head = {}, node..':'
  for _, m in ipairs(redis.call('ZRANGE', p..'inflight', 0, -1)) do
    if string.sub(m, 1, #head) == head and string.match(string.sub(m, #head + 1), '^%d+$') then
      mine[#mine + 1] = m
    end
  end
  if #mine > 0 then call_chunked('ZREM', p..'inflight', mine) end
  unclaim_all(node, redis.call('SMEMBERS', p..'claims:'..node))
  redis.call('DEL', p..'claims:'..node)
  redis.call('HDEL', p..'usage', 'pending:'..node)
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

-- Starts a call: the prefix (`argv[1]`), and the helpers' batch state cleared (a function of
-- the library keeps its upvalues from one call to the next; a script starts afresh anyway).
local function begin(argv)
  p = argv[1]
  u_bytes, u_objects, u_salts, u_salt_order = 0, 0, {}, {}
  u_count, u_peak, u_peak_start = nil, nil, nil
  kind, bonus, fixed_rates, ticked_recency = nil, nil, false, false
  mode_now = nil
  arc = nil
end

-- The first of the helpers every script starts with (then flru.lua, arc.lua, index.lua and
-- rounds.lua, one chunk; see mod.rs for the keys and the calling convention): the prefix,
-- batched reads and writes, sizes, usage, the clock, the order and the peak.
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

-- Eviction rounds (`round.lua`, and a write's end that starts one: `stored.lua`).
--
-- `run_round(node, a)`, `a` = {ttl_ms, capacity, watermark, ratio, policy (`per_salt`:
-- IsolatedLRU, below; else by capacity), ahead, catch_up, waiting} (strings): one eviction
-- round of `node`.
-- `stored` is the objects the index knows less those claimed for deletion (rounds in flight;
-- at their sizes when claimed, the usage field `claimed`);
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

-- The round's node, LMCache ratio and `catch_up` (set by `run_round`).
local r_node, ratio, catch_up
-- A round's count when `stored` (of `n` objects, `average` bytes each) reached `mark`.
local function due_count(n, stored, mark, average)
  local limit = math.floor(n * ratio)
  if catch_up then
    limit = math.max(limit, math.ceil((stored - mark * (1 - ratio)) / average))
  end
  return limit
end
-- Claims `names` (distinct, free) for this round: into `out` with their sizes.
local function victims(names, out)
  local size = claim_all(r_node, names)
  for i, name in ipairs(names) do
    out[#out + 1] = name
    out[#out + 1] = size[i] or '0'
  end
end
-- The first `limit` free names of sorted set `set`, among its 4 x limit + 64 + skip lowest.
-- Most of the lowest are free, so the `limit + skip + 8` lowest are read first, and the whole
-- window only when they hold too few (the same names either way).
-- `unsalted`: `set` is `recency` standing for the unsalted objects' (see `srec_key`), whose
-- salted names are skipped.
local function take(set, limit, skip, out, unsalted)
  local chosen = {}
  for _, window in ipairs({limit + skip + 8, 4 * limit + 64 + skip}) do
    local names = redis.call('ZRANGE', set, 0, window - 1)
    local free = free_of(names)
    if unsalted then
      local salt = salts_of(names)
      for i, name in ipairs(names) do
        if salt[i] then free[name] = nil end
      end
    end
    chosen = {}
    for _, name in ipairs(names) do
      if #chosen >= limit then break end
      if free[name] then
        chosen[#chosen + 1] = name
        free[name] = nil
      end
    end
    if #chosen >= limit or #names < window then break end
  end
  victims(chosen, out)
end
-- ARC (LMCache's rule): from T1 while its size, less what rounds in flight claimed from it,
-- is at least the target `arc_p`, else from T2; the other list when one runs out.
local function arc_take(limit, deleting, out)
  local t1_now = redis.call('ZCARD', p..'t1')
  if #deleting > 0 then
    for _, s in ipairs(call_chunked('ZMSCORE', p..'t1', deleting)) do
      if s then t1_now = t1_now - 1 end
    end
  end
  local target = math.floor(math.min(tonumber(redis.call('GET', p..'arc_p') or '0'), peak()))
  -- The lists' `limit + #deleting + 8` lowest are read first, and their 4 x limit + 64 +
  -- #deleting lowest only when a list read so ran out before the round had its names (the
  -- same names either way).
  local chosen, left = {}, limit
  for _, window in ipairs({limit + #deleting + 8, 4 * limit + 64 + #deleting}) do
    local lists = {redis.call('ZRANGE', p..'t1', 0, window - 1),
                   redis.call('ZRANGE', p..'t2', 0, window - 1)}
    local all = {}
    for _, l in ipairs(lists) do
      for _, name in ipairs(l) do all[#all + 1] = name end
    end
    local free = free_of(all)
    local at, short, t1 = {1, 1}, false, t1_now
    local function next_free(l)
      local list = lists[l]
      while at[l] <= #list do
        local name = list[at[l]]
        at[l] = at[l] + 1
        if free[name] then
          free[name] = nil
          return name
        end
      end
      if #list >= window then short = true end
      return nil
    end
    chosen, left = {}, limit
    for _ = 1, limit do
      local name = nil
      if t1 >= target then name = next_free(1) end
      if name then t1 = t1 - 1 else name = next_free(2) end
      if not name then
        name = next_free(1)
        if name then t1 = t1 - 1 end
      end
      if not name then break end
      chosen[#chosen + 1] = name
      left = left - 1
    end
    if not short then break end
  end
  victims(chosen, out)
  -- Objects in neither list (stored while the fleet had another order) go by recency.
  if left > 0 then take(p..'recency', left, #deleting + #chosen, out) end
end
-- FLRU's rate order: the free objects with the lowest rate scores (an object a listing added,
-- with no uses, as used once at its tick 0). As on one node (crate::eviction's FLRU,
-- RATE_REFRESH and RATE_ORDER_EXTRA), scoring every object is not done per round: `rates`
-- (a list) keeps the `peak / RATE_SHARE + 64` lowest names as of the tick in `rates_at`
-- (with the prior), recomputed once `peak / RATE_SHARE` ticks have passed or the list runs
-- out; a round takes the names still known, free and not touched since. One node rescores
-- every `peak / 64` ticks and keeps `peak / 16`: in Lua a rescoring costs about 2 us an
-- object, so the index does it 16 times less often and keeps 4 times more (FLRU at 10 %,
-- 3,000 requests: 2.0-2.9 -> 1.0 ms a request, hit ratio 0.125-0.137 -> 0.126-0.133 of
-- blocks; docs/benchmarks.md).
local RATE_SHARE = 4
local function rates_fill(prior, clock)
  local cap = peak()
  local names = known_names()
  local free = free_of(names)
  local recs = call_chunked('HMGET', p..'uses', names)
  local score, ls, free_names = {}, {}, {}
  for i, name in ipairs(names) do
    if free[name] then
      local u, f, l = record_of(recs[i])
      l = l or 0
      local k = #score + 1
      score[k] = rate_score(u or 1, f or l, l, clock, cap, prior)
      ls[k], free_names[k] = l, name
    end
  end
  redis.call('DEL', p..'rates')
  local chosen = lowest(score, ls, free_names, math.floor(cap / RATE_SHARE) + 64)
  for i = 1, #chosen, 1000 do
    redis.call('RPUSH', p..'rates', unpack(chosen, i, math.min(#chosen, i + 999)))
  end
  redis.call('SET', p..'rates_at', clock..':'..prior)
  return #chosen
end
local function rates_take(limit, prior, out)
  local clock = tonumber(redis.call('GET', p..'clock') or '0')
  local at, was = string.match(redis.call('GET', p..'rates_at') or '', '^(%d+):(.*)$')
  at = tonumber(at)
  if at == nil or tonumber(was) ~= prior or clock - at > peak() / RATE_SHARE then
    rates_fill(prior, clock)
    at = clock
  end
  local taken = 0
  while taken < limit do
    local popped = redis.call('LPOP', p..'rates', limit - taken)
    if not popped then
      -- Run out: score again (everything in a list scored now can be taken; what this round
      -- claimed is no longer free, so each list scored brings new names).
      if rates_fill(prior, clock) == 0 then break end
      at = clock
      popped = redis.call('LPOP', p..'rates', limit - taken)
      if not popped then break end
    end
    local size = size_map(popped)
    local known = {}
    for _, name in ipairs(popped) do
      if size[name] then known[#known + 1] = name end
    end
    local last, free = last_of(known), free_of(known)
    local chosen = {}
    for _, name in ipairs(known) do
      if last[name] <= at and free[name] then
        free[name] = nil
        chosen[#chosen + 1] = name
      end
    end
    victims(chosen, out)
    taken = taken + #chosen
  end
end
local function run_round(node, a)
  r_node, ratio, catch_up = node, tonumber(a[4]), a[7] == '1'
  local ttl, capacity, watermark = tonumber(a[1]), tonumber(a[2]), tonumber(a[3])
  if a[5] == 'per_salt' then
    -- IsolatedLRU: each salt against its own quota (none: 0, LMCache's allowlist rule); a
    -- round takes victims of the salts due only, from each salt's own recency.
    local u = redis.call('HGETALL', p..'usage')
    local bytes, quota = {}, {}
    for i = 1, #u, 2 do
      local f = u[i]
      if string.sub(f, 1, 5) == 'salt:' then bytes[string.sub(f, 6)] = tonumber(u[i + 1]) end
      if string.sub(f, 1, 6) == 'quota:' then quota[string.sub(f, 7)] = tonumber(u[i + 1]) end
    end
    local deleting = redis.call('SMEMBERS', p..'deleting')
    local dsalt, dsize = hmget(p..'salt', deleting), size_map(deleting)
    local claimed, claimed_n = {}, {}
    for _, name in ipairs(deleting) do
      local salt = dsalt[name] or ''
      claimed[salt] = (claimed[salt] or 0) + tonumber(dsize[name] or '0')
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
      -- Under `lru` or `arc` (a fleet whose last join was such a node's) the unsalted objects'
      -- recency is `recency`'s unsalted names.
      local key, shared = srec_key(salt)
      local n = redis.call('ZCARD', key)
      if shared then n = n - redis.call('HLEN', p..'salt') end
      local average = b / math.max(1, n)
      local skip = claimed_n[salt] or 0
      -- A salt without a quota (limit 0) loses all of it (ratio 1, as on one node).
      local limit = n - skip
      if mark > 0 then limit = due_count(n - skip, stored, mark, average) end
      take(key, math.max(1, limit), skip, out, shared)
    end
    return out
  end
  local u = redis.call('HGETALL', p..'usage')
  local known, objects, claimed = 0, 0, 0
  for i = 1, #u, 2 do
    if u[i] == 'bytes' then known = tonumber(u[i + 1]) end
    if u[i] == 'objects' then objects = tonumber(u[i + 1]) end
    if u[i] == 'claimed' then claimed = math.max(0, tonumber(u[i + 1])) end
  end
  local n_deleting = redis.call('SCARD', p..'deleting')
  local stored = known - claimed
  local landing = stored + pending_total(u) + tonumber(a[8])
  local mark, ahead = watermark * capacity, tonumber(a[6]) * capacity
  if capacity <= 0 or (stored < mark and landing < ahead) then return {0} end
  local holder = redis.call('GET', p..'lease')
  if holder and holder ~= node then return {-1} end
  redis.call('SET', p..'lease', node, 'PX', ttl)
  local average = 1
  if known > 0 and objects > 0 then average = known / objects end
  local limit = 0
  if stored >= mark then
    limit = due_count(objects - n_deleting, stored, mark, average)
  end
  if landing >= ahead then
    limit = math.max(limit, math.ceil((landing - ahead) / average))
  end
  local out = {1}
  if order() == 'arc' then
    arc_take(math.max(1, limit), redis.call('SMEMBERS', p..'deleting'), out)
  elseif order() == 'flru' and PRIOR[flru_mode()] then
    rates_take(math.max(1, limit), PRIOR[flru_mode()], out)
  else
    take(p..'recency', math.max(1, limit), n_deleting, out)
  end
  return out
end

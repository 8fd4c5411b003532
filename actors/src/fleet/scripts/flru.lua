-- FLRU's state in the index (after prelude.lua, whose helpers it uses): a ranking's records
-- and history, the priority and rate score of crate::eviction's FLRU, the rate order's
-- lowest, the shadows that choose the mode, and the mode a batch places new objects by.
-- Invariants: a shadow holds a name in `shN:order` exactly while it holds its record in
-- `shN:uses`; the bucket's `uses` holds records only of names `size` knows (one added by a
-- listing, or stored under another order, has none: last used at tick 0); a record that
-- leaves a ranking goes to its history as it was, and is taken back from it (then counted
-- on) when the name is used in that ranking again.

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

-- The bucket's objects, locks, claims and writes in flight (after prelude.lua, flru.lua and
-- arc.lua): touching and forgetting objects under every order, which names are free, claims
-- of deletions, the bytes being written, the deletions that race writes, reaping a lapsed
-- node, and `begin(ARGV)`, which starts every call. The invariants are mod.rs' (the keys).

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
-- The candidates go into the scratch set `window` for the call, and each listed node's set is
-- intersected with it (`SINTER`, which walks the smaller set and answers only the locked
-- names, usually none): a node costs one command and the names it holds, not a reply per
-- candidate (with `SMISMEMBER` per node, 97 more nodes holding 50 names each cost 3.05x the
-- server's instructions of a 3-node replay; this way 1.57x: docs/benchmarks.md). The cost
-- still grows with the nodes that hold locks; `window` is deleted before the call ends.
local function free_of(names)
  local out = {}
  if #names == 0 then return out end
  -- The names being deleted first (one read), then the others' locks, node by node.
  local deleting = deleting_of(names)
  local cand = {}
  for i = 1, #names do
    if not deleting[i] then
      cand[#cand + 1] = names[i]
      out[names[i]] = true
    end
  end
  if #cand == 0 then return out end
  local w = p..'window'
  call_chunked('SADD', w, cand)
  for _, node in ipairs(listed_nodes()) do
    for _, name in ipairs(redis.call('SINTER', p..'held:'..node, w)) do out[name] = nil end
  end
  redis.call('DEL', w)
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
  if redis.call('EXISTS', key) == 0 then redis.call('ZADD', key, 0, padding()) end
  redis.call('ZREMRANGEBYSCORE', key, '(0', '('..oldest[2])
  -- The epoch as the server wrote it: a string, formatted once, not once per name.
  local e = redis.call('GET', p..'epoch') or '0'
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

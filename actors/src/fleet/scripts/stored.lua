-- ARGV: p, node, written, ended_bytes, epoch, m, then m epochs, r, then r round arguments
-- (0 or 8: see `run_round`), then (name, salt, size, sampled) per object (`sampled` = 1:
-- FLRU's shadows sample it). The objects are now in the store: this node's writes
-- (`written` = 1, the oldest announced by WRITING at `epoch`; 0: no announcement known) or
-- objects a probe found (0). `ended_bytes` and the m epochs end this node's writes in flight
-- announced by WRITING (written or failed). A written object that a deletion may have removed
-- since its announcement is not added (see `gone_since`), nor one written without an
-- announcement. Objects are touched last first, so the first of a batch (a request's first
-- chunk) is the most recent, as on one node. Returns the usage hash; with round arguments,
-- {usage hash after the round, the round's reply}: a round of this node's, as `round.lua`
-- would run right after (one call fewer when the write fills the bucket).
local node, written, epoch, m = ARGV[2], ARGV[3] == '1', tonumber(ARGV[5]), tonumber(ARGV[6])
pending_add(node, -tonumber(ARGV[4]))
if m > 0 then writes_ended(node, {unpack(ARGV, 7, 6 + m)}) end
local r = tonumber(ARGV[7 + m])
local round = {unpack(ARGV, 8 + m, 7 + m + r)}
local function done()
  if r == 0 then return redis.call('HGETALL', p..'usage') end
  local out = run_round(node, round)
  return {redis.call('HGETALL', p..'usage'), out}
end
local first = 8 + m + r
local n = (#ARGV - first + 1) / 4
if n < 1 then return done() end
-- The objects, last first: object k is at ARGV[#ARGV - 4k + 1].
local names = {}
for i = #ARGV - 3, first, -4 do names[#names + 1] = ARGV[i] end
local tainted = {}
if written then
  if epoch > 0 then
    tainted = gone_since(names, epoch)
  else
    for k = 1, n do tainted[k] = true end
  end
end
local old_size, dying = sizes_of(names), deleting_of(names)
-- The common batch in one pass: every object unsalted, new to the index, not claimed, not
-- tainted and given once. It leaves what the general path below would, with less Lua per
-- name.
do
  local t0 = tonumber(redis.call('GET', p..'clock') or '0') + 1
  local fast, seen, sizes_, rec, bytes = true, {}, {}, {}, 0
  for k = 1, n do
    local i, name = #ARGV - 4 * k + 1, names[k]
    if ARGV[i + 1] ~= '' or old_size[k] or tainted[k] or seen[name] or dying[k] then
      fast = false
      break
    end
    seen[name] = true
    local size = ARGV[i + 2]
    bytes = bytes + tonumber(size)
    sizes_[2 * k - 1], sizes_[2 * k] = name, size
    rec[2 * k - 1], rec[2 * k] = t0 + k - 1, name
  end
  if fast then
    sizes_set(sizes_)
    usage_add('', bytes, n)
    usage_flush()
    redis.call('INCRBY', p..'clock', n)
    if order() == 'flru' then
      local salts, sampled = {}, {}
      for k = 1, n do salts[k], sampled[k] = '', ARGV[#ARGV - 4 * k + 4] == '1' end
      refresh_all(names, salts, t0, true, sampled)
      return done()
    end
    if order() == 'arc' then
      arc_load(names)
      for k = 1, n do arc_refresh(names[k], t0 + k - 1, true) end
      arc_store()
    end
    zadd_pairs(p..'recency', rec)
    if srec_kept('') then zadd_pairs(p..'srec:', rec) end
    return done()
  end
end
local salts, sizes, sampled = {}, {}, {}
for k = 1, n do
  local i = #ARGV - 4 * k + 1
  salts[k], sizes[k], sampled[k] = ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3] == '1'
end
local old_salt = salts_of(names)
-- Per name: its size and salt as the batch leaves it, whether it had a salt, and the salts'
-- recencies it left (name, salt pairs).
local cur_size, cur_salt, had_salt, left = {}, {}, {}, {}
-- A claimed name's size as it was (the usage field `claimed` follows its size).
local claimed_was = {}
local tn, ts, tsampled = {}, {}, {}
local any_salt = false
for i, name in ipairs(names) do
  if not tainted[i] then
    local old, was = cur_size[name], cur_salt[name]
    if old == nil then
      old, was = tonumber(old_size[i] or '0'), old_salt[i] or ''
      had_salt[name] = was ~= ''
      if dying[i] then claimed_was[name] = old end
    end
    local s = salts[i]
    if old > 0 then
      usage_add(was, -old, -1)
      if was ~= s then
        left[#left + 1] = name
        left[#left + 1] = was
      end
    end
    if s ~= '' or had_salt[name] then any_salt = true end
    cur_size[name], cur_salt[name] = sizes[i], s
    usage_add(s, sizes[i], 1)
    tn[#tn + 1] = name
    ts[#tn] = s
    tsampled[#tn] = sampled[i]
  end
end
if #tn > 0 then
  local sizes_, salted, unsalted, done = {}, {}, {}, {}
  local claimed_delta = 0
  for _, name in ipairs(tn) do
    if not done[name] then
      done[name] = true
      if claimed_was[name] then claimed_delta = claimed_delta + cur_size[name] - claimed_was[name] end
      sizes_[#sizes_ + 1] = name
      sizes_[#sizes_ + 1] = cur_size[name]
      if any_salt then
        if cur_salt[name] ~= '' then
          salted[#salted + 1] = name
          salted[#salted + 1] = cur_salt[name]
        elseif had_salt[name] then
          unsalted[#unsalted + 1] = name
        end
      end
    end
  end
  -- Out of the recency of every salt it was in but its last.
  for i = 1, #left, 2 do
    local was = left[i + 1]
    if cur_salt[left[i]] ~= was and srec_kept(was) then redis.call('ZREM', p..'srec:'..was, left[i]) end
  end
  sizes_set(sizes_)
  if #salted > 0 then call_chunked('HSET', p..'salt', salted, 2) end
  if #unsalted > 0 then call_chunked('HDEL', p..'salt', unsalted) end
  usage_flush()
  claimed_add(claimed_delta)
  refresh_all(tn, ts, ticks(#tn), true, tsampled)
end
return done()

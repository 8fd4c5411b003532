-- ARGV: p, node, written, ended_bytes, n_ended, n_ended names, then (name, salt, size,
-- sampled) per object (`sampled` = 1: FLRU's shadows sample it). The objects are now in the
-- store: this node's writes (`written` = 1) or objects a probe found (0). The ended names and
-- bytes end this node's writes announced by WRITING (written or failed). A written object
-- whose name a deletion tainted meanwhile is not added. Returns the usage hash. Objects are
-- touched last first, so the first of a batch (a request's first chunk) is the most recent,
-- as on one node.
local node, written, n = ARGV[2], ARGV[3] == '1', tonumber(ARGV[5])
pending_add(node, -tonumber(ARGV[4]))
-- The objects, last first.
local names, salts, sizes, sampled = {}, {}, {}, {}
for i = #ARGV - 3, 6 + n, -4 do
  local j = #names + 1
  names[j], salts[j], sizes[j], sampled[j] = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3] == '1'
end
local tainted = {}
if written and #names > 0 and redis.call('EXISTS', p..'tainted') == 1 then
  tainted = call_chunked('HMGET', p..'tainted', names)
end
local old_size, old_salt = {}, {}
if #names > 0 then
  old_size = call_chunked('HMGET', p..'size', names)
  old_salt = call_chunked('HMGET', p..'salt', names)
end
-- Per name: its size and salt as the batch leaves it, whether it had a salt, and the salts'
-- recencies it left (name, salt pairs).
local cur_size, cur_salt, had_salt, left = {}, {}, {}, {}
local tn, ts, tsampled = {}, {}, {}
for i, name in ipairs(names) do
  if not tainted[i] then
    local old, was = cur_size[name], cur_salt[name]
    if old == nil then
      old, was = tonumber(old_size[i] or '0'), old_salt[i] or ''
      had_salt[name] = was ~= ''
    end
    local s = salts[i]
    if old > 0 then
      usage_add(was, -old, -1)
      if was ~= s then
        left[#left + 1] = name
        left[#left + 1] = was
      end
    end
    cur_size[name], cur_salt[name] = sizes[i], s
    usage_add(s, sizes[i], 1)
    tn[#tn + 1] = name
    ts[#tn] = s
    tsampled[#tn] = sampled[i]
  end
end
if #tn > 0 then
  local sizes_, salted, unsalted, done = {}, {}, {}, {}
  for _, name in ipairs(tn) do
    if not done[name] then
      done[name] = true
      sizes_[#sizes_ + 1] = name
      sizes_[#sizes_ + 1] = cur_size[name]
      if cur_salt[name] ~= '' then
        salted[#salted + 1] = name
        salted[#salted + 1] = cur_salt[name]
      elseif had_salt[name] then
        unsalted[#unsalted + 1] = name
      end
    end
  end
  -- Out of the recency of every salt it was in but its last.
  for i = 1, #left, 2 do
    if cur_salt[left[i]] ~= left[i + 1] then redis.call('ZREM', p..'srec:'..left[i + 1], left[i]) end
  end
  call_chunked('HSET', p..'size', sizes_, 2)
  if #salted > 0 then call_chunked('HSET', p..'salt', salted, 2) end
  if #unsalted > 0 then call_chunked('HDEL', p..'salt', unsalted) end
  usage_flush()
  refresh_all(tn, ts, ticks(#tn), true, tsampled)
end
local ended = {}
for i = 6, 6 + n - 1 do ended[#ended + 1] = ARGV[i] end
my_writes_ended(node, ended)
return redis.call('HGETALL', p..'usage')

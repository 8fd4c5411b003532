-- ARGV: p, node, written, ended_bytes, n_ended, n_ended names, then (name, salt, size,
-- sampled) per object (`sampled` = 1: FLRU's shadows sample it). The objects are now in the
-- store: this node's writes (`written` = 1) or objects a probe found (0). The ended names and
-- bytes end this node's writes announced by WRITING (written or failed). A written object
-- whose name a deletion tainted meanwhile is not added. Returns the usage hash. Objects are
-- touched last first, so the first of a batch (a request's first chunk) is the most recent,
-- as on one node.
local node, written, n = ARGV[2], ARGV[3] == '1', tonumber(ARGV[5])
pending_add(node, -tonumber(ARGV[4]))
local objects = {}
for i = #ARGV - 3, 6 + n, -4 do
  objects[#objects + 1] = {ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3] == '1'}
end
local names = {}
for i, o in ipairs(objects) do names[i] = o[1] end
local d = distinct(names)
local tainted = {}
if written then tainted = hmget(p..'tainted', d) end
local size, salt = hmget(p..'size', d), hmget(p..'salt', d)
-- Per name: its size and salt as the batch leaves them, and the salts' recencies it was in.
local cur_size, cur_salt, was_in = {}, {}, {}
for _, name in ipairs(d) do
  cur_size[name] = tonumber(size[name] or '0')
  cur_salt[name] = salt[name] or ''
  was_in[name] = {}
end
local items = {}
for _, o in ipairs(objects) do
  local name, s, bytes = o[1], o[2], o[3]
  if not tainted[name] then
    local old = cur_size[name]
    if old > 0 then
      usage_add(cur_salt[name], -old, -1)
      was_in[name][cur_salt[name]] = true
    end
    cur_size[name], cur_salt[name] = bytes, s
    usage_add(s, bytes, 1)
    items[#items + 1] = {name, s, 0, true, o[4]}
  end
end
if #items > 0 then
  local t = ticks(#items)
  for i, it in ipairs(items) do it[3] = t + i - 1 end
  local sizes, salted, unsalted, touched = {}, {}, {}, {}
  for _, it in ipairs(items) do
    local name = it[1]
    if not touched[name] then
      touched[name] = true
      sizes[#sizes + 1] = name
      sizes[#sizes + 1] = cur_size[name]
      if cur_salt[name] ~= '' then
        salted[#salted + 1] = name
        salted[#salted + 1] = cur_salt[name]
      else
        unsalted[#unsalted + 1] = name
      end
      -- Out of the recency of every salt it was in but its last.
      for s in pairs(was_in[name]) do
        if s ~= cur_salt[name] then redis.call('ZREM', p..'srec:'..s, name) end
      end
    end
  end
  call_chunked('HSET', p..'size', sizes, 2)
  if #salted > 0 then call_chunked('HSET', p..'salt', salted, 2) end
  if #unsalted > 0 then call_chunked('HDEL', p..'salt', unsalted) end
  usage_flush()
  refresh_all(items)
end
local ended = {}
for i = 6, 6 + n - 1 do ended[#ended + 1] = ARGV[i] end
my_writes_ended(node, ended)
return redis.call('HGETALL', p..'usage')

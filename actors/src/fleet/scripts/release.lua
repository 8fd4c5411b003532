-- ARGV: p, node, evicted, n_removed, then n_removed names the node deleted from the store,
-- then names it kept. A removed name is forgotten (`evicted` = 1: by an eviction round, so ARC
-- keeps its ghost); if a node is writing it, it is tainted (that write may have landed before
-- the delete: its STORED will not add it, and a lookup probes the store). A name this node
-- has not claimed is ignored. Returns the usage hash.
local node, evicted, n = ARGV[2], ARGV[3] == '1', tonumber(ARGV[4])
local names, removed_at = {}, {}
for i = 5, #ARGV do
  names[#names + 1] = ARGV[i]
  if i < 5 + n and removed_at[ARGV[i]] == nil then removed_at[ARGV[i]] = true end
end
local d = distinct(names)
local claimed = call_chunked('SMISMEMBER', p..'claims:'..node, d)
local mine, gone = {}, {}
for i, name in ipairs(d) do
  if claimed[i] == 1 then
    mine[#mine + 1] = name
    if removed_at[name] then gone[#gone + 1] = name end
  end
end
if #mine > 0 then
  call_chunked('SREM', p..'claims:'..node, mine)
  call_chunked('HDEL', p..'deleting', mine)
end
if #gone > 0 then
  forget_all(gone, evicted)
  usage_flush()
  local writing = {}
  if redis.call('EXISTS', p..'writing') == 1 then writing = call_chunked('HMGET', p..'writing', gone) end
  local taint = {}
  for i, name in ipairs(gone) do
    if writing[i] then
      taint[#taint + 1] = name
      taint[#taint + 1] = 1
    end
  end
  if #taint > 0 then call_chunked('HSET', p..'tainted', taint, 2) end
end
return redis.call('HGETALL', p..'usage')

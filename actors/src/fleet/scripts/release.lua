-- ARGV: p, node, evicted, n_removed, then n_removed names the node deleted from the store,
-- then names it kept. A removed name is forgotten (`evicted` = 1: by an eviction round, so ARC
-- keeps its ghost) and recorded as gone at the current epoch (a write announced before now may
-- have landed before the delete: its STORED will not add it, and a lookup probes the store).
-- A name this node has not claimed is ignored. Returns the usage hash.
local node, evicted, n = ARGV[2], ARGV[3] == '1', tonumber(ARGV[4])
local names = {}
for i = 5, #ARGV do names[#names + 1] = ARGV[i] end
local claimed = call_chunked('SMISMEMBER', p..'claims:'..node, names)
-- A name given twice (removed and kept) counts as removed; forget_all forgets it once.
local mine, gone, seen = {}, {}, {}
for i, name in ipairs(names) do
  if claimed[i] == 1 then
    if i <= n then gone[#gone + 1] = name end
    if not seen[name] then
      seen[name] = true
      mine[#mine + 1] = name
    end
  end
end
local sizes = sizes_of(mine)
unclaim_all(node, mine, sizes)
if #gone > 0 then
  forget_all(gone, evicted, by_name(mine, sizes))
  usage_flush()
  gone_record(gone)
end
return redis.call('HGETALL', p..'usage')

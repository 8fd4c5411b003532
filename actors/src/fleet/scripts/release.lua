-- ARGV: p, node, evicted, n_removed, then n_removed names the node deleted from the store,
-- then names it kept. A removed name is forgotten (`evicted` = 1: by an eviction round, so ARC
-- keeps its ghost) and recorded as gone at the current epoch (a write announced before now may
-- have landed before the delete: its STORED will not add it, and a lookup probes the store).
-- A name this node has not claimed is ignored. Returns the usage hash.
local node, evicted, n = ARGV[2], ARGV[3] == '1', tonumber(ARGV[4])
local names = {unpack(ARGV, 5)}
local claimed = call_chunked('SMISMEMBER', p..'claims:'..node, names)
-- A name given twice (removed and kept) counts as removed, and is forgotten once. `same`:
-- every name claimed was removed, once (the usual release), so `gone` is `mine`.
local mine, gone, seen = {}, {}, {}
local nm, ng, same = 0, 0, true
for i = 1, #names do
  if claimed[i] == 1 then
    local name = names[i]
    if i <= n then
      ng = ng + 1
      gone[ng] = name
    else
      same = false
    end
    if seen[name] then
      same = false
    else
      seen[name] = true
      nm = nm + 1
      mine[nm] = name
    end
  end
end
local sizes = sizes_of(mine)
unclaim_all(node, mine, sizes)
if ng > 0 then
  if same then
    forget_distinct(gone, sizes, evicted)
  else
    forget_all(gone, evicted, by_name(mine, sizes))
  end
  usage_flush()
  gone_record(gone)
end
return redis.call('HGETALL', p..'usage')

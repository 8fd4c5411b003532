-- ARGV: p, node, bytes, limit, names: this node starts writing these objects, `bytes` in all
-- (counted by eviction rounds until STORED ends them, or until the node is reaped). With a
-- `limit` (> 0), only if the bucket's footprint stays within it: the bytes of the objects the
-- index knows (claimed ones too: the bucket holds them until deleted), plus the bytes live
-- nodes are writing, plus these; else nothing is recorded. Returns {1 (started) or 0 (full),
-- then the usage hash}.
local node, bytes, limit = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local out, started = nil, 1
if limit > 0 then
  out = redis.call('HGETALL', p..'usage')
  local known = 0
  for i = 1, #out, 2 do
    if out[i] == 'bytes' then known = tonumber(out[i + 1]) end
  end
  if known + pending_total(out) + bytes > limit then started = 0 end
end
if started == 1 then
  pending_add(node, bytes)
  local names = {}
  for i = 5, #ARGV do names[#names + 1] = ARGV[i] end
  local d, k = tally(names)
  counts_add(p..'writing', d, k, 1)
  counts_add(p..'writes:'..node, d, k, 1)
  out = redis.call('HGETALL', p..'usage')
end
table.insert(out, 1, started)
return out

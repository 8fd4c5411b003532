-- ARGV: p, node, bytes, limit: this node starts a write of `bytes` (counted by eviction rounds
-- until STORED ends them, or until the node is reaped). With a `limit` (> 0), only if the
-- bucket's footprint stays within it: the bytes of the objects the index knows (claimed ones
-- too: the bucket holds them until deleted), plus the bytes live nodes are writing, plus
-- these; else nothing is recorded. A write started takes the next epoch and is in flight
-- until its STORED (see `gone_record`). Returns {1 (started) or 0 (full), the write's epoch
-- (0 when not started), then the usage hash}.
local node, bytes, limit = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local out, started, epoch = nil, 1, 0
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
  epoch = redis.call('INCR', p..'epoch')
  redis.call('ZADD', p..'inflight', epoch, node..':'..epoch)
  out = redis.call('HGETALL', p..'usage')
end
table.insert(out, 1, epoch)
table.insert(out, 1, started)
return out

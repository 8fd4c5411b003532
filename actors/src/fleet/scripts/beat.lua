-- ARGV: p, node, ttl_ms. Returns the number of live nodes, or -1 when this node had lapsed
-- (it was reaped: its locks are gone, and it must join again).
local node, ttl = ARGV[2], tonumber(ARGV[3])
local now = now_ms()
reap(now)
if redis.call('ZSCORE', p..'nodes', node) == false then
  return -1
end
redis.call('ZADD', p..'nodes', now + ttl, node)
hashes_ready()
return redis.call('ZCARD', p..'nodes')

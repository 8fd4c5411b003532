-- ARGV: p, node, ttl_ms, fresh, order, then (salt, limit) pairs. A process's first join
-- (`fresh` = 1) drops what an earlier process with its id held; a join again after a lost
-- connection keeps what this process holds (its locks are still its own; if it was reaped
-- meanwhile, they are gone already). `order` (`lru`, `flru:BONUS` or `arc`; empty for a node
-- that does not evict) becomes the fleet's eviction order: the last evicting node to join
-- decides. The pairs are this node's configured IsolatedLRU quotas, for salts the fleet has
-- none for yet (a quota set at run time, by any node, stays). Returns {live nodes, the order
-- before}.
local node, ttl = ARGV[2], tonumber(ARGV[3])
local now = now_ms()
if ARGV[4] == '1' then drop_node(node) end
local before = redis.call('GET', p..'order') or ARGV[5]
if ARGV[5] ~= '' then redis.call('SET', p..'order', ARGV[5]) end
for i = 6, #ARGV, 2 do
  redis.call('HSETNX', p..'usage', 'quota:'..ARGV[i], ARGV[i + 1])
end
redis.call('ZADD', p..'nodes', now + ttl, node)
reap(now)
return {redis.call('ZCARD', p..'nodes'), before}

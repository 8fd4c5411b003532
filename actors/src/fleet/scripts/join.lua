-- ARGV: p, node, ttl_ms, fresh, order, shards, then (salt, limit) pairs. `shards` (empty on
-- a bucket's other tags) is the count of hash tags this node splits the bucket's index over:
-- the first join records it; a join that gives another count is refused with an error and
-- changes nothing (an index from before the count was recorded, which holds nodes or usage,
-- is split over 1). A process's first join (`fresh` = 1) drops what an earlier process with
-- its id held; a join again after a lost connection keeps what this process holds (its locks
-- are still its own; if it was reaped meanwhile, they are gone already). `order` (`lru`,
-- `lru:salts`, `flru:BONUS` or `arc`; empty for a node that does not evict) becomes the
-- fleet's eviction order: the last evicting node to join decides. The pairs are this node's configured
-- IsolatedLRU quotas, for salts the fleet has none for yet (a quota set at run time, by any
-- node, stays). Returns {live nodes, the order before}.
local node, ttl = ARGV[2], tonumber(ARGV[3])
if ARGV[6] ~= '' then
  local recorded = redis.call('GET', p..'shards')
  local layout = recorded
  if not layout and (redis.call('EXISTS', p..'usage') == 1 or redis.call('EXISTS', p..'nodes') == 1) then
    layout = '1'
  end
  if layout and layout ~= ARGV[6] then
    return redis.error_reply('kvtier fleet: this bucket\'s index is split over '..layout..
      ' hash tags and this node gives fleet.shards = '..ARGV[6]..'; every node on one bucket '..
      'must give the same count (docs/fleet.md, "One bucket over many shards")')
  end
  if not recorded then redis.call('SET', p..'shards', ARGV[6]) end
end
local now = now_ms()
if ARGV[4] == '1' then drop_node(node) end
local was = redis.call('GET', p..'order')
local before = was or ARGV[5]
if ARGV[5] ~= '' then
  redis.call('SET', p..'order', ARGV[5])
  -- Only `lru:salts` keeps the unsalted objects' recency `srec:` (see `srec_key`): built
  -- when the order changes to it, from `recency`'s ticks (`lru`, `arc`) or the records' last
  -- ticks (FLRU), and dropped when it changes from it.
  local function keeps(o) return o == 'lru:salts' end
  was = was or 'lru'
  if keeps(ARGV[5]) and not keeps(was) then
    redis.call('DEL', p..'srec:')
    if string.sub(was, 1, 5) == 'flru:' then
      local names = known_names()
      local salt, recs = salts_of(names), call_chunked('HMGET', p..'uses', names)
      local ticked = {}
      for i, name in ipairs(names) do
        if not salt[i] then
          local _, _, l = record_of(recs[i])
          ticked[#ticked + 1] = l or 0
          ticked[#ticked + 1] = name
        end
      end
      zadd_pairs(p..'srec:', ticked)
    elseif redis.call('EXISTS', p..'recency') == 1 then
      redis.call('ZUNIONSTORE', p..'srec:', 1, p..'recency')
      zrem_all(p..'srec:', redis.call('HKEYS', p..'salt'))
    end
  elseif keeps(was) and not keeps(ARGV[5]) then
    redis.call('DEL', p..'srec:')
  end
end
for i = 7, #ARGV, 2 do
  redis.call('HSETNX', p..'usage', 'quota:'..ARGV[i], ARGV[i + 1])
end
redis.call('ZADD', p..'nodes', now + ttl, node)
hashes_ready()
reap(now)
return {redis.call('ZCARD', p..'nodes'), before}

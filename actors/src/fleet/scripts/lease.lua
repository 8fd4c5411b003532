-- ARGV: p, node, ttl_ms, lease (`lease`: eviction; `listing`: the bucket listing). 1 when this
-- node holds the lease (taken or renewed for ttl_ms), else 0.
local node, ttl, key = ARGV[2], tonumber(ARGV[3]), p..ARGV[4]
local holder = redis.call('GET', key)
if holder == false then
  redis.call('SET', key, node, 'PX', ttl)
  return 1
elseif holder == node then
  redis.call('PEXPIRE', key, ttl)
  return 1
end
return 0

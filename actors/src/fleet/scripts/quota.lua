-- ARGV: p, salt[, limit]. Sets the fleet's IsolatedLRU quota of a salt (removes it without a
-- limit: the salt then falls under the allowlist rule, limit 0). Returns the previous limit,
-- or -1 when there was none.
local field = 'quota:'..ARGV[2]
local old = tonumber(redis.call('HGET', p..'usage', field) or '-1')
if ARGV[3] then redis.call('HSET', p..'usage', field, ARGV[3]) else redis.call('HDEL', p..'usage', field) end
return old

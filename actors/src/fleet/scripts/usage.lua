-- ARGV: p. The usage hash.
return redis.call('HGETALL', p..'usage')

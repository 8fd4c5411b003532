-- ARGV: p, node, lease. Gives the lease up if this node holds it.
if redis.call('GET', p..ARGV[3]) == ARGV[2] then
  redis.call('DEL', p..ARGV[3])
end
return 0

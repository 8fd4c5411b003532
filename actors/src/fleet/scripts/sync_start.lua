-- ARGV: p, node. Starts a listing of the bucket: clears this node's seen set; returns the
-- clock now (objects stored or hit after it are never swept by this listing).
redis.call('DEL', p..'seen:'..ARGV[2])
return tonumber(redis.call('GET', p..'clock') or '0')

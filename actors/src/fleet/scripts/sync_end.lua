-- ARGV: p, node, start tick. Forgets the objects the listing did not see, unless stored or hit
-- since it started, locked, or being deleted. Returns the usage hash.
local node, start = ARGV[2], tonumber(ARGV[3])
local names = known_names()
local seen = call_chunked('SMISMEMBER', p..'seen:'..node, names)
local unseen = {}
for i, name in ipairs(names) do
  if seen[i] == 0 then unseen[#unseen + 1] = name end
end
local last = last_of(unseen)
local free = free_of(unseen)
local gone = {}
for _, name in ipairs(unseen) do
  if free[name] and last[name] <= start then gone[#gone + 1] = name end
end
forget_all(gone, false)
usage_flush()
redis.call('DEL', p..'seen:'..node)
return redis.call('HGETALL', p..'usage')

-- ARGV: p, names: objects a node found missing from the store (forgotten unless a node is
-- deleting them). Returns the usage hash.
local names = {}
for i = 2, #ARGV do names[#names + 1] = ARGV[i] end
local d = distinct(names)
local deleting = by_name(d, deleting_of(d))
local gone = {}
for _, name in ipairs(d) do
  if not deleting[name] then gone[#gone + 1] = name end
end
forget_all(gone, false)
usage_flush()
return redis.call('HGETALL', p..'usage')

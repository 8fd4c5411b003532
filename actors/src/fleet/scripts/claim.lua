-- ARGV: p, node, names. Claims the deletion of each name no node locks and none is deleting;
-- returns the names claimed. Until released, lookups do not lock them.
local names = {}
for i = 3, #ARGV do names[#names + 1] = ARGV[i] end
local d = distinct(names)
local free = free_of(d)
local out = {}
for _, name in ipairs(d) do
  if free[name] then out[#out + 1] = name end
end
claim_all(ARGV[2], out)
return out

-- ARGV: p, node, names. A name this node does not hold (reaped, or never locked) is ignored.
local names = {}
for i = 3, #ARGV do names[#names + 1] = ARGV[i] end
unlock_all(ARGV[2], names)
return 0

-- ARGV: p, node, then (name, salt, size, sampled) per listed object (as STORED's; a listing
-- is not a use, so `sampled` is not read). Marks each seen; adds those the index does not know
-- (least recent: tick 0) unless a node is deleting them. Returns the number added.
local node = ARGV[2]
local names = {}
for i = 3, #ARGV, 4 do names[#names + 1] = ARGV[i] end
if #names == 0 then return 0 end
call_chunked('SADD', p..'seen:'..node, names)
local d = distinct(names)
local size, deleting = size_map(d), by_name(d, deleting_of(d))
local added, sizes, salted, anames, asalts = {}, {}, {}, {}, {}
for i = 3, #ARGV, 4 do
  local name, salt, bytes = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  if not size[name] and not deleting[name] and not added[name] then
    added[name] = true
    sizes[#sizes + 1] = name
    sizes[#sizes + 1] = bytes
    if salt ~= '' then
      salted[#salted + 1] = name
      salted[#salted + 1] = salt
    end
    usage_add(salt, bytes, 1)
    anames[#anames + 1] = name
    asalts[#anames] = salt
  end
end
if #anames == 0 then return 0 end
sizes_set(sizes)
if #salted > 0 then call_chunked('HSET', p..'salt', salted, 2) end
usage_flush()
refresh_all(anames, asalts, 0, false, {})
return #anames

-- ARGV: p, limit, scan. The first `limit` names by fleet recency, oldest first, among the
-- `scan` oldest, that no node locks and none is deleting; as name, size pairs (tests only).
local limit, scan = tonumber(ARGV[2]), tonumber(ARGV[3])
local names = redis.call('ZRANGE', p..'recency', 0, scan - 1)
local free = free_of(names)
local size = size_map(names)
local out = {}
for _, name in ipairs(names) do
  if #out >= 2 * limit then break end
  if free[name] then
    out[#out + 1] = name
    out[#out + 1] = size[name] or '0'
  end
end
return out

-- ARGV: p, then (name, sampled) per name. Refreshes the recency of the names the index knows,
-- last first.
local names, sampled = {}, {}
for i = #ARGV - 1, 2, -2 do
  names[#names + 1] = ARGV[i]
  sampled[#names] = ARGV[i + 1] == '1'
end
if #names == 0 then return 0 end
local size = sizes_of(names)
local known, ksampled = {}, {}
for i, name in ipairs(names) do
  if size[i] then
    known[#known + 1] = name
    ksampled[#known] = sampled[i]
  end
end
if #known > 0 then
  local salt = salts_of(known)
  for i = 1, #known do salt[i] = salt[i] or '' end
  refresh_all(known, salt, ticks(#known), true, ksampled)
end
return 0

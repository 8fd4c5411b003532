-- ARGV: p, then (name, sampled) per name. Refreshes the recency of the names the index knows,
-- last first.
local names = {}
for i = 2, #ARGV - 1, 2 do names[#names + 1] = ARGV[i] end
local d = distinct(names)
local size, salt = hmget(p..'size', d), hmget(p..'salt', d)
local items = {}
for i = #ARGV - 1, 2, -2 do
  local name = ARGV[i]
  if size[name] then items[#items + 1] = {name, salt[name] or '', 0, true, ARGV[i + 1] == '1'} end
end
if #items > 0 then
  local t = ticks(#items)
  for i, it in ipairs(items) do it[3] = t + i - 1 end
  refresh_all(items)
end
return 0

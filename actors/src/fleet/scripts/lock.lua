-- ARGV: p, node, then (name, sampled) per name. Per name: -1 (being deleted: not locked), else
-- locked and the size the index knows (0: unknown, the node must probe the store). A known
-- name's recency is refreshed, last name first (the first is the most recent, as on one node).
local node = ARGV[2]
local names, sampled = {}, {}
for i = 3, #ARGV - 1, 2 do
  names[#names + 1] = ARGV[i]
  sampled[#names] = ARGV[i + 1] == '1'
end
local d = distinct(names)
local deleting = hmget(p..'deleting', d)
local size, salt = hmget(p..'size', d), hmget(p..'salt', d)
local out, k, order_, items = {}, {}, {}, {}
for i = #names, 1, -1 do
  local name = names[i]
  if deleting[name] then
    out[i] = -1
  else
    if k[name] == nil then
      k[name] = 0
      order_[#order_ + 1] = name
    end
    k[name] = k[name] + 1
    if size[name] then
      items[#items + 1] = {name, salt[name] or '', 0, true, sampled[i]}
      out[i] = tonumber(size[name])
    else
      out[i] = 0
    end
  end
end
counts_add(p..'locks', order_, k)
counts_add(p..'held:'..node, order_, k)
if #items > 0 then
  local t = ticks(#items)
  for i, it in ipairs(items) do it[3] = t + i - 1 end
  refresh_all(items)
end
return out

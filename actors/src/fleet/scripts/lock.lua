-- ARGV: p, node, then (name, sampled) per name. Per name: -1 (being deleted: not locked), else
-- locked and the size the index knows (0: unknown, the node must probe the store). A known
-- name's recency is refreshed, last name first (the first is the most recent, as on one node).
local node = ARGV[2]
local names, sampled = {}, {}
for i = 3, #ARGV - 1, 2 do
  names[#names + 1] = ARGV[i]
  sampled[#names] = ARGV[i + 1] == '1'
end
local deleting = {}
if redis.call('EXISTS', p..'deleting') == 1 then deleting = call_chunked('HMGET', p..'deleting', names) end
local size = call_chunked('HMGET', p..'size', names)
local out, k, order_ = {}, {}, {}
local known, ksampled = {}, {}
for i = #names, 1, -1 do
  local name = names[i]
  if deleting[i] then
    out[i] = -1
  else
    local c = k[name]
    if c == nil then
      k[name] = 1
      order_[#order_ + 1] = name
    else
      k[name] = c + 1
    end
    if size[i] then
      known[#known + 1] = name
      ksampled[#known] = sampled[i]
      out[i] = tonumber(size[i])
    else
      out[i] = 0
    end
  end
end
counts_add(p..'locks', order_, k, 1)
counts_add(p..'held:'..node, order_, k, 1)
if #known > 0 then
  local salt = call_chunked('HMGET', p..'salt', known)
  for i = 1, #known do salt[i] = salt[i] or '' end
  refresh_all(known, salt, ticks(#known), true, ksampled)
end
return out

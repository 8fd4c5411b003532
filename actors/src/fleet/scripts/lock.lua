-- ARGV: p, node, sampled, then the names; `sampled` has one character per name (`1`: FLRU's
-- shadows sample it). Per name: -1 (being deleted: not locked), else locked and the size the
-- index knows (0: unknown, the node must probe the store). The node counts its own locks: the
-- names locked join its set `held:NODE` (see `free_of`). A known name's recency is refreshed,
-- last name first (the first is the most recent, as on one node).
local node, flags, n = ARGV[2], ARGV[3], #ARGV - 3
if n <= 0 then return {} end
local names = {}
for i = 4, #ARGV do names[#names + 1] = ARGV[i] end
local deleting = deleting_of(names)
local size = sizes_of(names)
local out, lock = {}, {}
local known, ksampled = {}, {}
for i = n, 1, -1 do
  if deleting[i] then
    out[i] = -1
  else
    lock[#lock + 1] = names[i]
    if size[i] then
      known[#known + 1] = names[i]
      ksampled[#known] = string.byte(flags, i) == 49
      out[i] = tonumber(size[i])
    else
      out[i] = 0
    end
  end
end
if #lock > 0 then call_chunked('SADD', p..'held:'..node, lock) end
if #known > 0 then
  local salt = salts_of(known)
  for i = 1, #known do salt[i] = salt[i] or '' end
  refresh_all(known, salt, ticks(#known), true, ksampled)
end
return out

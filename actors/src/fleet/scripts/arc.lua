-- ARC's lists in the index (after prelude.lua, whose helpers it uses).
-- Invariant: a call changes the lists only between one `arc_load` and its `arc_store`, so a
-- batch reads each list once and writes it once; the trims keep `|t1| + |b1| <= peak` and
-- all four `<= 2 * peak` after each store or eviction that touches them.

-- ARC's lists for a batch, as one name at a time would leave them, with the lists read once
-- and written once: `arc_load(names)` reads which list each name is in and the lists' sizes,
-- the batch's changes are made in Lua, and `arc_store()` writes them. One approximation,
-- bounded by the batch: the ghosts a trim drops are dropped after the batch (the lowest then;
-- a ghost that a trim dropped before a later name of the batch hit it counts as hit).
local arc = nil
local function arc_load(names)
  local d = distinct(names)
  local lists = {}
  for _, l in ipairs({'t1', 't2', 'b1', 'b2'}) do
    local sc = call_chunked('ZMSCORE', p..l, d)
    for i, name in ipairs(d) do
      if sc[i] then
        lists[name] = lists[name] or {}
        lists[name][l] = true
      end
    end
  end
  local target = tonumber(redis.call('GET', p..'arc_p') or '0')
  arc = {
    lists = lists,
    n = {t1 = redis.call('ZCARD', p..'t1'), t2 = redis.call('ZCARD', p..'t2'),
         b1 = redis.call('ZCARD', p..'b1'), b2 = redis.call('ZCARD', p..'b2')},
    target = target,
    target_was = target,
    add = {t1 = {}, t2 = {}, b1 = {}, b2 = {}},
    pop = {b1 = 0, b2 = 0},
  }
end
-- `name` joins list `l` at score `at` (a list it was not in counts one more).
local function arc_add(name, l, at)
  local in_ = arc.lists[name] or {}
  arc.lists[name] = in_
  if not in_[l] then arc.n[l] = arc.n[l] + 1 end
  in_[l] = true
  arc.add[l][name] = at
end
-- `name` leaves list `l`; true when it was in it.
local function arc_drop(name, l)
  local in_ = arc.lists[name]
  if not (in_ and in_[l]) then return false end
  in_[l] = false
  arc.n[l] = arc.n[l] - 1
  arc.add[l][name] = false
  return true
end
local function arc_trim()
  local c, n = peak(), arc.n
  if n.t1 + n.b1 > c and n.b1 > 0 then
    local k = math.min(n.b1, n.t1 + n.b1 - c)
    arc.pop.b1, n.b1 = arc.pop.b1 + k, n.b1 - k
  end
  local all = n.t1 + n.t2 + n.b1 + n.b2
  if all > 2 * c then
    local k = math.min(n.b2, all - 2 * c)
    arc.pop.b2, n.b2 = arc.pop.b2 + k, n.b2 - k
    local rest = math.min(n.b1, all - 2 * c - k)
    arc.pop.b1, n.b1 = arc.pop.b1 + rest, n.b1 - rest
  end
end
-- ARC's lists for one name touched at `at` (`used`: a store or hit; else a listing's add).
local function arc_refresh(name, at, used)
  local in_ = arc.lists[name] or {}
  if in_.t2 or (used and in_.t1) then
    arc_drop(name, 't1')
    arc_add(name, 't2', at)
  elseif not used then
    arc_add(name, 't1', at)
  else
    local b1, b2 = arc.n.b1, arc.n.b2
    if arc_drop(name, 'b1') then
      arc.target = math.min(peak(), arc.target + math.max(1, b2 / b1))
      arc_add(name, 't2', at)
    elseif arc_drop(name, 'b2') then
      arc.target = math.max(0, arc.target - math.max(1, b1 / b2))
      arc_add(name, 't2', at)
    else
      arc_add(name, 't1', at)
    end
    arc_trim()
  end
end
-- Drops an object's ARC lists; one its round evicted leaves a ghost of the list it was in, at
-- tick `clock`.
local function arc_forget(name, evicted, clock)
  local in_t1, in_t2 = arc_drop(name, 't1'), arc_drop(name, 't2')
  if evicted and (in_t1 or in_t2) then
    arc_add(name, in_t1 and 'b1' or 'b2', clock)
    arc_trim()
  else
    arc_drop(name, 'b1')
    arc_drop(name, 'b2')
  end
end
-- Writes the batch's changes to ARC's lists: each name leaves the lists it left and joins the
-- ones it joined at its last score, then the trims' ghosts go (the lowest of each).
local function arc_store()
  for _, l in ipairs({'t1', 't2', 'b1', 'b2'}) do
    local gone, pairs_ = {}, {}
    for name, at in pairs(arc.add[l]) do
      if at then
        pairs_[#pairs_ + 1] = at
        pairs_[#pairs_ + 1] = name
      else
        gone[#gone + 1] = name
      end
    end
    zrem_all(p..l, gone)
    zadd_pairs(p..l, pairs_)
  end
  for _, l in ipairs({'b1', 'b2'}) do
    if arc.pop[l] > 0 then redis.call('ZPOPMIN', p..l, arc.pop[l]) end
  end
  if arc.target ~= arc.target_was then redis.call('SET', p..'arc_p', arc.target) end
  arc = nil
end

-- ARGV: p, node, then the round's arguments (see `run_round` in rounds.lua): one eviction
-- round, atomically.
return run_round(ARGV[2], {unpack(ARGV, 3, 10)})

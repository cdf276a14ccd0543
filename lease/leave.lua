-- leave.lua: takes the caller's entry out of the fleet's roster
-- (RosterKey), for an instance that stops: the others count it no more at
-- once, where its entry would have stayed counted for its window.
--
-- KEYS[1] the roster key.
-- ARGV[1] the caller's instance id (not empty).
--
-- Returns 1 when the caller had an entry, 0 when it had none. Touches no
-- other entry, and no key but the roster.
local id = ARGV[1]
if id == nil or id == '' then
  return redis.error_reply('ERR roster: instance id must not be empty')
end
return redis.call('ZREM', KEYS[1], id)

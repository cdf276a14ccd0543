-- roster.lua: the fleet's roster of instances (RosterKey), a sorted set of
-- instance ids, each scored by when its entry expires: its last count
-- plus its window, in milliseconds of Redis's clock. Each entry lives for
-- its own instance's window, so instances with different windows do not
-- drop each other.
--
-- KEYS[1] the roster key.
-- ARGV[1] the caller's instance id (not empty).
-- ARGV[2] the caller's window in milliseconds (an integer >= 1).
--
-- Records the caller at Redis's TIME, drops the entries that expired,
-- keeps the key for at least two of the caller's windows (a fleet that
-- stops leaves nothing behind), and returns how many entries are left,
-- the caller's among them.
local id = ARGV[1]
local window = tonumber(ARGV[2])
if id == nil or id == '' then
  return redis.error_reply('ERR roster: instance id must not be empty')
end
if window == nil or window < 1 or window ~= math.floor(window) or window > 1e15 then
  return redis.error_reply('ERR roster: window must be a whole number of ms in [1, 1e15], got ' .. tostring(ARGV[2]))
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- The reads come before the writes: a script that fails is not rolled
-- back, and an ACL may refuse a command (PTTL and ZCARD, which the
-- tenants' scripts of earlier releases never called, are missing from
-- one written for theirs): refused after the ZADD, a count left the
-- caller's entry, without PTTL in a roster nothing would expire
-- (TestRosterRefusedWritesNothing). The count is the entries before,
-- plus the caller's when new (ZADD's reply), less those expired (the
-- caller's, scored after now, is not among them); the TTL read before
-- the ZADD is the one after it (-2 for a new key: renewed below).
local n = redis.call('ZCARD', KEYS[1])
local ttl = redis.call('PTTL', KEYS[1])
n = n + redis.call('ZADD', KEYS[1], string.format('%d', now + window), id)
n = n - redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%d', now))
if ttl < 2 * window then
  redis.call('PEXPIRE', KEYS[1], string.format('%d', 2 * window))
end
return n

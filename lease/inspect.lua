-- leasequota inspect: read a tenant's keys as they are, at one instant of
-- Redis's clock, for an operator (Client.Inspect, Client.ReadBuckets). It
-- writes nothing.
--
-- KEYS[1]  bucket key, KEYS[2] instance registry, KEYS[3] quota override,
--          KEYS[4] applied release ids (all in the tenant's slot)
-- ARGV[1]  "1" to read the registry's entries and count the release ids,
--          "0" for the bucket and the override alone
--
-- Returns {now (Redis TIME, microseconds), HGETALL of the bucket, PTTL of
-- the bucket (ms; -2 missing, -1 no expiry), HGETALL of the override,
-- HGETALL of the registry (empty with ARGV[1] "0"), ZCARD of the release
-- ids (0 with "0")}.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local bucket = redis.call('HGETALL', KEYS[1])
local pttl = redis.call('PTTL', KEYS[1])
local override = redis.call('HGETALL', KEYS[3])
local registry = {}
local releases = 0
if ARGV[1] == '1' then
  registry = redis.call('HGETALL', KEYS[2])
  releases = redis.call('ZCARD', KEYS[4])
end
return {now, bucket, pttl, override, registry, releases}

-- The floor of a read (see README.md): TIME and HMGET of the bucket.
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local v = redis.call('HMGET', KEYS[1], 'tk', 'ts', 'h', 'rg', 'e')
return {1, v[1] or '0', now, 0, 0, '', 0, '', 0}

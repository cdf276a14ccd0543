-- The floor of an acquire with the bucket hash of today's layout (see
-- README.md): TIME, HMGET, HSET, PEXPIRE.
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local rate, burst, want = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local v = redis.call('HMGET', KEYS[1], 'tk', 'ts', 'h', 'rg', 'e')
local tk, ts = tonumber(v[1]), tonumber(v[2])
local tokens = burst
if tk then tokens = math.min(burst, tk + (now - ts) * rate / 1e6) end
local g = math.min(want, math.floor(tokens))
tokens = tokens - g
local s = string.format('%.17g', tokens)
redis.call('HSET', KEYS[1], 'tk', s, 'ts', string.format('%d', now))
redis.call('PEXPIRE', KEYS[1], string.format('%d', math.ceil((burst - tokens) / rate * 1000) + 1000))
return {g, s, now, 0, 0, '', 0, '', 0}

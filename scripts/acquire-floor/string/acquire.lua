-- The floor of an acquire with the bucket packed in one string (see
-- README.md): TIME, GET, SET ... PX. The value is padded to the length
-- of a busy bucket's fields.
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local rate, burst, want = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local v = redis.call('GET', KEYS[1] .. 's')
local tokens = burst
if v then
  local a, b = string.match(v, '^([^:]*):([^:]*)')
  local tk, ts = tonumber(a), tonumber(b)
  if tk and ts then
    tokens = math.min(burst, tk + (now - ts) * rate / 1e6)
  end
end
local g = math.min(want, math.floor(tokens))
tokens = tokens - g
local s = string.format('%.17g', tokens)
local ttl = string.format('%d', math.ceil((burst - tokens) / rate * 1000) + 1000)
redis.call('SET', KEYS[1] .. 's', s .. ':' .. string.format('%d', now) .. ':hhhhhhhhhhhhhhhhhhhhhh:rrrrrrrrrrrrrrrrrrr', 'PX', ttl)
return {g, s, now, 0, 0, '', 0, '', 0}

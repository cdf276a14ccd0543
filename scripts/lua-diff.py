# Differential check of two releases' scripts (scripts/lua-diff.sh runs
# it): the same random acquires (single, with a registry and
# reservations, batches), releases, quota changes and corrupted fields,
# on two redis-servers, one with each release's common.lua + acquire.lua,
# release.lua, quota.lua, compared reply by reply and key by key after
# every call. The clock is a hash both read (TIME replaced by HMGET
# fakeclock s us) and PEXPIRE/PERSIST are logged to a list instead of
# applied, so that the TTLs compare exactly too.
#
#   python3 scripts/lua-diff.py <lease dir A> <lease dir B> <port A> <port B> [seed] [steps]
import random, socket, sys

class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(('127.0.0.1', port))
        self.f = self.s.makefile('rb')
    def send(self, c):
        c = [x if isinstance(x, bytes) else str(x).encode() for x in c]
        buf = [b'*%d\r\n' % len(c)]
        for x in c:
            buf.append(b'$%d\r\n%s\r\n' % (len(x), x))
        self.s.sendall(b''.join(buf))
        return self.read()
    def read(self):
        line = self.f.readline()
        t, rest = line[:1], line[1:-2]
        if t == b'+': return rest.decode()
        if t == b'-': return ('ERR', rest.decode())
        if t == b':': return int(rest)
        if t == b'$':
            n = int(rest)
            if n < 0: return None
            return self.f.read(n + 2)[:-2].decode()
        if t == b'*':
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise Exception('bad reply %r' % line)

def variant(src):
    src = src.replace("redis.call('TIME')", "redis.call('HMGET', 'fakeclock', 's', 'us')")
    n = src.count("redis.call('PEXPIRE', ")
    src = src.replace("redis.call('PEXPIRE', ", "redis.call('RPUSH', 'pexlog', 'PEXPIRE', ")
    src = src.replace("redis.call('PERSIST', ", "redis.call('RPUSH', 'pexlog', 'PERSIST', ")
    assert n >= 1
    return src

def load(c, d):
    common = open(d + '/common.lua').read()
    return {k: c.send(['SCRIPT', 'LOAD', variant(common + open('%s/%s.lua' % (d, k)).read())]) for k in ('acquire', 'release', 'quota')}

base, new = Conn(int(sys.argv[3])), Conn(int(sys.argv[4]))
sb, sn = load(base, sys.argv[1]), load(new, sys.argv[2])
seed = int(sys.argv[5]) if len(sys.argv) > 5 else 1
steps = int(sys.argv[6]) if len(sys.argv) > 6 else 3000
rng = random.Random(seed)

def dump(c):
    out = {}
    for k in sorted(c.send(['KEYS', '*'])):
        t = c.send(['TYPE', k])
        if t == 'hash':
            v = c.send(['HGETALL', k]); v = sorted(zip(v[::2], v[1::2]))
        elif t == 'zset':
            v = c.send(['ZRANGE', k, 0, -1, 'WITHSCORES'])
        elif t == 'list':
            v = c.send(['LRANGE', k, 0, -1])
        else:
            v = c.send(['GET', k])
        out[k] = (t, v)
    return out

def both(cmd_b, cmd_n):
    rb, rn = base.send(cmd_b), new.send(cmd_n)
    return rb, rn

def num(choices):
    return rng.choice(choices)

tenants = ['a', 'b', 'c']
insts = ['i0', 'i1', 'i2', 'i3', 'i4']
clock = 1796190000000000
grants = []
for c in (base, new):
    c.send(['FLUSHALL'])
counts = {}
for step in range(steps):
    # advance the fake clock
    r = rng.random()
    if r < 0.1: dt = 0
    elif r < 0.2: dt = 1
    elif r < 0.6: dt = rng.randint(1, 200000)
    elif r < 0.9: dt = rng.randint(1, 3000000)
    elif r < 0.97: dt = rng.randint(1, 60000000)
    else: dt = -rng.randint(1, 2000000)
    clock += dt
    for c in (base, new):
        c.send(['HSET', 'fakeclock', 's', str(clock // 1000000), 'us', str(clock % 1000000)])
        c.send(['DEL', 'pexlog'])
    rate = num(['1e9', '10', '2.5', '1', '0.001', '1000', '100', '7.3', '1e-15', '0.5'])
    burst = num(['1000000000000000', '999999999999999', '1', '10', '100', '1073741824', '1000000000', '40', '3'])
    op = rng.random()
    t = rng.choice(tenants)
    k = '{t:%s}' % t
    def acq_args(with_len=None):
        want = str(rng.choice([0, 1, 5, 10, 50, 100, 1000, rng.randint(0, 200)]))
        a = [rate, burst, want]
        form = rng.random() if with_len is None else with_len
        if form < 0.15:
            return a, 'plain'
        inst = rng.choice(insts)
        window = num(['2100', '60000', '1', '500', '3600000'])
        demand = num(['-0', '0.1', '999999999999999.5', '0', '100', '2.5', '1000', '1e9', '33.333333333333336', 'nan', '-1', '5'])
        a += [inst, window, demand]
        if form < 0.6:
            return a, 'reg'
        a.append(num(['0', '2000', '500', '', '4000']))
        return a, 'res'
    if op < 0.5:
        a, kind = acq_args()
        cb = ['EVALSHA', sb['acquire'], 3, k, k + ':i', k + ':q'] + a
        cn = ['EVALSHA', sn['acquire'], 3, k, k + ':i', k + ':q'] + a
        name = 'acquire-' + kind
    elif op < 0.6:
        n = rng.randint(2, 4)
        keys, args = [], []
        for i in range(n):
            tt = rng.choice(tenants)
            kk = '{t:%s}' % tt
            keys += [kk, kk + ':i', kk + ':q']
            a, kind = acq_args(with_len=0.7)
            if kind == 'plain':
                a += ['', '', '', '']
            elif kind == 'reg':
                a += ['']
            args += a
        cb = ['EVALSHA', sb['acquire'], len(keys)] + keys + args
        cn = ['EVALSHA', sn['acquire'], len(keys)] + keys + args
        name = 'batch'
    elif op < 0.85:
        amount = str(rng.choice([0, 1, 5, 10, 40, rng.randint(0, 100)]))
        age = str(rng.choice([0, 10, 1000, 5000, 100000]))
        grant = str(rng.choice([0, (clock - rng.randint(0, 5000000)) % 4294967296, (clock - rng.randint(0, 100000)) % 4294967296]))
        a = [rate, burst, amount, age, grant]
        if rng.random() < 0.7:
            a += ['rid%d' % rng.randint(0, 30), '60000']
        cb = ['EVALSHA', sb['release'], 3, k, k + ':r', k + ':q'] + a
        cn = ['EVALSHA', sn['release'], 3, k, k + ':r', k + ':q'] + a
        name = 'release'
    elif op < 0.93:
        r = rng.random()
        if r < 0.3:
            a = ['get']
        elif r < 0.75:
            a = ['set', rate, burst, num(['10', '1000', '0.5', '1e9']), num(['5', '100', '1073741824']), '1', '50', '1000000000', '0', t]
        else:
            a = ['del', rate, burst]
        cb = ['EVALSHA', sb['quota'], 2, k, k + ':q'] + a
        cn = ['EVALSHA', sn['quota'], 2, k, k + ':q'] + a
        name = 'quota-' + a[0]
    else:
        # mutate a stored field on both
        f = rng.choice(['hb', 'p1', 'p2', 'tk', 'rg', 's0', 'p9', 'ts'])
        v = rng.choice(['x', '5', '1e400', 'nan', '%d:%s' % (clock - 5, burst), '%d:%d:%s:%s' % (clock - 100, 2, '10', '-1'), '-3', '1:2', str(clock + 5000)])
        if rng.random() < 0.5:
            v2 = rng.choice(['x', '%d:5:1' % (clock - 10), '1:2:3:4', '%d:1e9:nan' % clock])
            i = rng.choice(insts)
            cb = cn = ['HSET', k + ':i', i, v2]
        else:
            cb = cn = ['HSET', k, f, v]
        name = 'mutate'
    rb, rn = both(cb, cn)
    counts[name] = counts.get(name, 0) + 1
    if rb != rn:
        print('step %d %s: replies differ\n base %r\n new  %r\n cmd %r' % (step, name, rb, rn, cb[3:]))
        sys.exit(1)
    db, dn = dump(base), dump(new)
    if db != dn:
        for kk in sorted(set(db) | set(dn)):
            if db.get(kk) != dn.get(kk):
                print('step %d %s: key %s differs\n base %r\n new  %r\n cmd %r\n reply %r' % (step, name, kk, db.get(kk), dn.get(kk), cb[3:], rb))
        sys.exit(1)
print('seed %d: %d steps equal %r' % (seed, steps, counts))

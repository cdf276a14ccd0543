#!/usr/bin/env bash
# Measures what acquire.lua costs Redis on each of its paths, one tenant
# per script call as AcquireMany sends it without WithBatch (3 keys, 6
# arguments: rate, burst, want, instance, window ms, demand), in
# instructions the server executes per call (valgrind's callgrind: they
# do not move with the machine's load) and in commands run inside the
# script per call (INFO commandstats).
#
#   bash scripts/acquire-paths.sh [lease dir, default ./lease] [tenants per path, default 200]
#
# REDIS_SERVER names another redis-server binary (one built with symbols
# shows where the instructions go: callgrind_annotate of the dumps that
# ACQUIRE_PATHS_KEEP=dir keeps); ACQUIRE_PATHS_ONLY=regexp measures only
# the paths it matches. ACQUIRE_PATHS_FAKE_CLOCK=1 makes the script read
# its clock from a hash (HMGET fakeclock s us, in place of TIME) that
# this script sets, and the waits below advance it instead of sleeping:
# every run then takes the same paths (the starved and reserving ones
# otherwise depend on how long the set-up took under callgrind).
# ACQUIRE_PATHS_FCALL=1 loads the scripts as a Redis Function library
# instead (FUNCTION LOAD: common.lua's functions made once, at load,
# acquire.lua's body the function) and calls it with FCALL, to measure
# what a script's functions cost when EVALSHA makes them on every call.
#
# The paths, each measured over one call per tenant after a set-up:
#
#   first       a tenant's first acquire: no bucket, no registry
#   steady/1    a bucket refilled to full (rate 1e9, burst 2^30, want 10),
#               the registry summary and the caller's entry fresh (window
#               an hour): the entry is read, not written
#   steady/16   the same with 16 instances in the registry
#   join/16     a 16th instance's first acquire of a tenant the 15 others
#               hold (summary fresh, every demand met): its entry is new
#   start/16    16 instances' first acquires of a new tenant, one after the
#               other, as at a fleet's start: figures per call
#   batch8      steady/1 in acquire.lua's batch form, 8 tenants a call (as
#               AcquireMany sends them on one server by default); its
#               figures are per tenant
#   round/1     as BenchmarkSyncRound with -syncround.window=2.1s (rounds
#               0.5 s apart; with the Limiter's window, its default, the
#               rounds take the steady/1 path):
#               the tenant's last call more than a quarter window ago, so
#               the summary is recomputed (HGETALL, sort, PEXPIRE of the
#               registry) and the entry rewritten
#   round/16    the same with 16 instances in the registry
#   starved     4 instances asking 100/s each of a bucket of rate 10/s,
#               burst 100, drained: a grant of a token or none, capped at
#               the credit (the entry rewritten when the credit moved), the
#               level history pushed
#   history8    rate 1/s, burst 1e9, want 10: a level history of 8
#               entries read, pushed, merged and partly rewritten
#   reserve     starved, with a reservation length of 2 s (ARGV[7]), 1.2 s
#               after the last call: the refill a second ahead is free again
#   share/ask   16 instances holding rate shares, one asking again (ARGV[8];
#               scripts that grant shares only)
#   share/take  the same, one taking 10 tokens, its share kept
#
# A trivial script (return 1) with the same keys and arguments is the
# floor: the transport, the dispatch and the KEYS/ARGV tables.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
lease=${1:-$here/lease}
tenants=${2:-200}
command -v callgrind_control >/dev/null || { echo "needs valgrind (callgrind_control)" >&2; exit 1; }

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
dir=$(mktemp -d)
# ACQUIRE_PATHS_PLAIN=1: no callgrind (a quick check of the paths' commands).
if [ -n "${ACQUIRE_PATHS_PLAIN:-}" ]; then
  "${REDIS_SERVER:-redis-server}" --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" >"$dir/redis.log" 2>&1 &
else
  valgrind --tool=callgrind --callgrind-out-file="$dir/cg.out" \
    "${REDIS_SERVER:-redis-server}" --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" >"$dir/valgrind.log" 2>&1 &
fi
vg=$!
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; wait "$vg" 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 300); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done

python3 - "$lease" "$dir" "$port" "$tenants" <<'EOF'
import glob, os, re, shutil, socket, subprocess, sys, time

lease, out, port, tenants = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

class Conn:
    def __init__(self):
        self.s = socket.create_connection(('127.0.0.1', port))
        self.f = self.s.makefile('rb')
    def send(self, cmds):
        buf = []
        for c in cmds:
            c = [x if isinstance(x, bytes) else str(x).encode() for x in c]
            buf.append(b'*%d\r\n' % len(c))
            for x in c:
                buf.append(b'$%d\r\n%s\r\n' % (len(x), x))
        self.s.sendall(b''.join(buf))
        return [self.read() for _ in cmds]
    def read(self):
        line = self.f.readline()
        t, rest = line[:1], line[1:-2]
        if t == b'+':
            return rest.decode()
        if t == b'-':
            return Exception(rest.decode())
        if t == b':':
            return int(rest)
        if t == b'$':
            n = int(rest)
            if n < 0:
                return None
            d = self.f.read(n + 2)[:-2]
            return d.decode()
        if t == b'*':
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise Exception('bad reply %r' % line)
    def do(self, *c):
        r = self.send([c])[0]
        if isinstance(r, Exception):
            raise r
        return r

c = Conn()
pid = int([l.split(':')[1] for l in c.do('INFO', 'server').splitlines() if l.startswith('process_id:')][0])
src = open(lease + '/common.lua').read() + open(lease + '/acquire.lua').read()
fake = os.environ.get('ACQUIRE_PATHS_FAKE_CLOCK')
clock = 1796190000000000
def set_clock():
    if fake:
        c.do('HSET', 'fakeclock', 's', clock // 1000000, 'us', clock % 1000000)
if fake:
    assert src.count("redis.call('TIME')") == 1
    src = src.replace("redis.call('TIME')", "redis.call('HMGET', 'fakeclock', 's', 'us')")
acq = c.do('SCRIPT', 'LOAD', src)
triv = c.do('SCRIPT', 'LOAD', 'return 1')
FCALL = os.environ.get('ACQUIRE_PATHS_FCALL')
if FCALL:
    common = open(lease + '/common.lua').read()
    body = open(lease + '/acquire.lua').read()
    if fake:
        common = common.replace("redis.call('TIME')", "redis.call('HMGET', 'fakeclock', 's', 'us')")
    lib = '#!lua name=lqbench\n' + common + '\nredis.register_function("lq_acquire", function(KEYS, ARGV)\n' + body + '\nend)\nredis.register_function("lq_trivial", function(KEYS, ARGV) return 1 end)\n'
    c.do('FUNCTION', 'LOAD', 'REPLACE', lib)
    acq, triv = 'lq_acquire', 'lq_trivial'

def keys(t):
    k = '{%s}' % t
    return [k, k + ':i', k + ':q']

def script(sha, ks, args):
    return ['FCALL' if FCALL else 'EVALSHA', sha, len(ks)] + ks + list(args)

def call(sha, t, args):
    return script(sha, keys(t), args)

# A call of the batch form: every tenant's eight arguments, '' past its own.
def call_batch(sha, ts, args_of):
    ks, args = [], []
    for t in ts:
        ks += keys(t)
        a = list(args_of(t))
        args += a + [''] * (8 - len(a))
    return script(sha, ks, args)

def run(cmds):
    for i in range(0, len(cmds), 100):
        for r in c.send(cmds[i:i + 100]):
            # A batch replies with an array, its failed tenants' errors
            # inside it: a path whose calls fail would measure a script
            # that stopped part way.
            for e in (r if isinstance(r, list) else [r]):
                if isinstance(e, Exception):
                    sys.exit('acquire-paths: %s' % e)

def commandstats():
    s = {}
    for l in c.do('INFO', 'commandstats').splitlines():
        if l.startswith('cmdstat_'):
            name, rest = l[len('cmdstat_'):].split(':', 1)
            s[name] = int(rest.split(',')[0].split('=')[1])
    return s

def measure(cmds):
    c.do('CONFIG', 'RESETSTAT')
    subprocess.run(['callgrind_control', '-z', str(pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run(cmds)
    subprocess.run(['callgrind_control', '-d', str(pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stats = commandstats()
    ir = 0
    dumps = sorted(glob.glob(out + '/cg.out.*'), key=os.path.getmtime)
    if dumps:
        for l in open(dumps[-1]):
            if l.startswith('summary:') or l.startswith('totals:'):
                ir = int(l.split()[1])
                break
        keep = os.environ.get('ACQUIRE_PATHS_KEEP')
        if keep:
            shutil.move(dumps[-1], os.path.join(keep, 'cg.' + current.replace('/', '_')))
        else:
            os.remove(dumps[-1])
    inner = sum(v for k, v in stats.items() if k not in ('evalsha', 'fcall', 'config|resetstat', 'function|load'))
    return ir / len(cmds), inner / len(cmds), stats

FULL = ['1e9', '1073741824', '10']
results = []
current = ''
def path(name, setup, args_of, sleep=0.0, sha=None, n=None, batch=1, calls=1):
    global current
    if not re.search(os.environ.get('ACQUIRE_PATHS_ONLY', ''), name):
        return
    current = name
    global clock
    c.do('FLUSHALL')
    if FCALL:
        c.do('FUNCTION', 'LOAD', 'REPLACE', lib)
    clock += 10000000
    set_clock()
    n = n or tenants
    ts = ['%s:%05d' % (name, i) for i in range(n)]
    # A bucket refilled to full expires a second after its last call; the
    # set-up of many tenants under callgrind takes longer. PERSIST right
    # after a tenant's set-up keeps it (the script reads no TTL, and sets
    # its own).
    run([x for t in ts for x in [call(acq, t, a) for a in setup(t)] + [['PERSIST', keys(t)[0]]]])
    if fake:
        clock += int((sleep or 0.05) * 1e6)
        set_clock()
    elif sleep:
        time.sleep(sleep)
    if batch > 1:
        ir, inner, stats = measure([call_batch(sha or acq, ts[i:i + batch], args_of) for i in range(0, n, batch)])
        ir, inner = ir / batch, inner / batch
    elif calls > 1:
        # args_of(t, k) is the tenant's k-th call: figures per call.
        ir, inner, stats = measure([call(sha or acq, t, args_of(t, k)) for t in ts for k in range(calls)])
        n = n * calls
    else:
        ir, inner, stats = measure([call(sha or acq, t, args_of(t)) for t in ts])
    cmds = ' '.join('%s %.2f' % (k, v / n) for k, v in sorted(stats.items()) if k not in ('evalsha', 'fcall', 'config|resetstat', 'function|load'))
    results.append((name, ir))
    print('%-10s %8.0f instructions per call  %.2f commands per call: %s' % (name, ir, inner, cmds), flush=True)

path('trivial', lambda t: [], lambda t: FULL + ['bench', '2100', '0'], sha=triv)
path('first', lambda t: [], lambda t: FULL + ['bench', '2100', '0'])
path('steady/1', lambda t: [FULL + ['bench', '3600000', '100']], lambda t: FULL + ['bench', '3600000', '100'])
path('steady/16', lambda t: [FULL + ['i%d' % i, '3600000', '100'] for i in range(16)], lambda t: FULL + ['i0', '3600000', '100'])
path('join/16', lambda t: [FULL + ['i%d' % i, '3600000', '100'] for i in range(15)], lambda t: FULL + ['i15', '3600000', '100'])
# A fleet's start: 16 instances' first acquires of each tenant, one after
# the other (demand 4 each, a young lease's; rate 1e9): figures per call.
path('start/16', lambda t: [], lambda t, k: FULL + ['i%d' % k, '3600000', '4'], calls=16)
# A window of a minute, the calls 16 s apart: as BenchmarkSyncRound's 2.1 s
# and 0.5 s, for a set-up that takes seconds under callgrind (round/16 on a
# quarter of the tenants, so that its set-up takes less than the window).
path('round/1', lambda t: [FULL + ['bench', '60000', '0']], lambda t: FULL + ['bench', '60000', '0'], sleep=16)
path('round/16', lambda t: [FULL + ['i%d' % i, '60000', '0'] for i in range(16)], lambda t: FULL + ['i0', '60000', '0'], sleep=16, n=max(1, tenants // 4))
# steady/1 in batches of 8 tenants a call (acquire.lua's batch form, as
# AcquireMany sends it on one server by default): per tenant.
path('batch8', lambda t: [FULL + ['bench', '3600000', '100']], lambda t: FULL + ['bench', '3600000', '100'], batch=8)
STARVED = ['10', '100', '50']
path('starved', lambda t: [STARVED + ['i%d' % (i % 4), '3600000', '100'] for i in range(8)], lambda t: STARVED + ['i0', '3600000', '100'])
path('history8', lambda t: [['1', '1000000000', '10', 'bench', '3600000', '100']] * 12, lambda t: ['1', '1000000000', '10', 'bench', '3600000', '100'])
path('reserve', lambda t: [STARVED + ['i%d' % (i % 4), '3600000', '100', '2000'] for i in range(8)], lambda t: STARVED + ['i0', '3600000', '100', '2000'], sleep=1.2)
# Rate shares (scripts that grant them: ARGV[8]). 16 instances of demand
# 100 each hold shares of a tenant of rate 1000 (epochs of 10 s, a hold of
# 0.5 s, a headroom of 0.1): share/ask is i0 asking again (its share ended
# and granted anew, its entry and the bucket's record rewritten), as an
# instance renews once a period; share/take is i0 taking 10 tokens with
# the shares in force, its share kept.
if src.count('ARGV[o + 8]'):
    SHARED = ['1000', '1000']
    TERMS = 'A10000000:0:500000:0.1'
    path('share/ask', lambda t: [SHARED + ['0', 'i%d' % i, '3600000', '100', '', TERMS] for i in range(16)], lambda t: SHARED + ['0', 'i0', '3600000', '100', '', TERMS])
    path('share/take', lambda t: [SHARED + ['0', 'i%d' % i, '3600000', '100', '', TERMS] for i in range(16)], lambda t: SHARED + ['10', 'i0', '3600000', '100'])
EOF

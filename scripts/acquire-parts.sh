#!/usr/bin/env bash
# Measures what each part of acquire.lua costs Redis, in instructions per
# tenant acquired, by running the script and copies of it with one part
# taken out on a redis-server under valgrind's callgrind. Instruction
# counts do not depend on what else the machine runs, where timings on a
# shared 2-core machine vary by up to 3x (scripts/redis-cost.sh); they
# are not time (cache misses and allocation weigh differently), so the
# table also gives them in µs at the whole script's measured µs per
# instruction when that is given.
#
#   bash scripts/acquire-parts.sh [lease dir, default ./lease] [µs per acquire, for the µs column]
#
# Each case sends 10 EVALSHA calls of a batch of 32 acquires that name
# one tenant (rate 1e9/s, burst 2^30, want 10: a bucket refilled to full
# between calls, as for a tenant within its quota; registry window an
# hour), after one untimed call per tenant, and divides the instructions
# the server executed by the 320 acquires. 31 of 32 acquires find what
# the previous one left. Two shapes:
#
#   steady  the registry entry and summary are fresh: the entry is read,
#           not written, and the summary is parsed, not recomputed;
#   round   the summary is recomputed (HGETALL of the registry, PEXPIRE
#           of it) and the entry rewritten on every call, as when a
#           tenant's calls are more than 1/4 of the registry window apart
#           (BenchmarkSyncRound's 10,000-tenant rounds with
#           -syncround.window=2.1s).
#
# A part taken out is replaced by what the rest of the script needs of
# it (see the variants below). The lines at the end attribute the whole
# script's instructions to the C functions under it (callgrind_annotate,
# inclusive), which the parts cut across.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
lease=${1:-$here/lease}
usPerCall=${2:-}
command -v callgrind_control >/dev/null || { echo "needs valgrind (callgrind_control)" >&2; exit 1; }

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
dir=$(mktemp -d)
valgrind --tool=callgrind --callgrind-out-file="$dir/cg.out" \
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" >"$dir/valgrind.log" 2>&1 &
vg=$!
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; wait "$vg" 2>/dev/null || true; rm -rf "$dir"' EXIT
cli() { redis-cli -p "$port" "$@"; }
for _ in $(seq 300); do cli ping >/dev/null 2>&1 && break; sleep 0.1; done

# The variants, written by python from common.lua + acquire.lua. Each
# replacement names the text it replaces; a script that no longer holds
# it fails here rather than measure the wrong thing.
python3 - "$lease" "$dir" <<'EOF'
import sys
lease, out = sys.argv[1], sys.argv[2]
full = open(lease + '/common.lua').read() + open(lease + '/acquire.lua').read()

def variant(name, src, reps):
    # A replacement whose alternatives end in None is made only where the
    # script has one (a part that older scripts do not have).
    for alternatives, new in reps:
        for old in alternatives:
            if old is None:
                break
            if old in src:
                src = src.replace(old, new)
                break
        else:
            sys.exit('acquire-parts: %s: none of %r in the script' % (name, alternatives))
    open('%s/%s.lua' % (out, name), 'w').write(src)

history = ([
    "  local h = history_at(state, now, burst, tokens, btext)",
    "  local h = history_at(state, now, burst, tokens)",
    "  local h = history(state, now, burst)\n  history_push(h, now, tokens)",
], "  local h = {now, level_code(burst)}")
cases = [
    ('full', []),
    # no level history: the call records none (neither parse nor push),
    # its history always a full bucket's one entry, which store writes
    # only when it changed. (The variant that made it {} stopped at
    # store, which reads an entry, on every call since the history was
    # packed, 0ce7621: measure now fails on such a reply.)
    ('no_history', [history]),
    # no instance registry: as a caller without WithInstance
    ('no_registry', [(["  local id = ARGV[o + 4]\n"], "  local id = ''\n")]),
    # no override read: as if none were stored, without asking
    ('no_override', [(["local function read_override(qkey)\n"],
                      "local function read_override(qkey)\n  do return {}, nil, nil end\n")]),
    # no PEXPIRE of the bucket
    ('no_bucket_expire', [(["    redis.call('PEXPIRE', key, string.format('%d', ttl))"], "    local _ = ttl")]),
    # no PEXPIRE of the registry (round only)
    ('no_registry_expire', [(["    redis.call('PEXPIRE', ikey, string.format('%d', ttl))",
                              "      redis.call('PEXPIRE', ikey, string.format('%d', window / 500))"], "      local _ = window")]),
    # the summary recomputed only when missing or this instance is new
    ('no_summary_recompute', [(["or now - st >= window * SUMMARY_AGE then"], "then"),
                              (["st <= now and now - st < window * SUMMARY_AGE then", None], "true then")]),
    # the entry rewritten only when its credit or demand changed
    ('no_entry_rewrite', [(["now - prevSeen >= window * ENTRY_AGE or"], "")]),
]
for shape in ('steady', 'round'):
    for name, reps in cases:
        src = full
        if shape == 'round':
            src = src.replace('local SUMMARY_AGE = 1 / 8', 'local SUMMARY_AGE = 0').replace('local ENTRY_AGE = 1 / 4', 'local ENTRY_AGE = 0')
        variant(shape + '.' + name, src, reps)
open(out + '/trivial.lua', 'w').write('return 1\n')
EOF

pid=$(cli info server | tr -d '\r' | awk -F: '/^process_id:/{print $2}')
batches=10 batch=32
# A tenant's arguments in a batch: seven, or eight from the scripts that
# grant rate shares (an empty share operation).
targs=' 1e9 1073741824 10 bench 3600000 0 ""'
if grep -q 'ARGV\[o + 8\]' "$lease/acquire.lua"; then
  targs+=' ""'
fi
# calls SHA PREFIX: the EVALSHA lines of one round.
calls() {
  local sha=$1 p=$2 b i keys args
  for b in $(seq "$batches"); do
    keys='' args=''
    for i in $(seq "$batch"); do
      keys+=" {$p:$b} {$p:$b}:i {$p:$b}:q"
      args+=$targs
    done
    echo "EVALSHA $sha $((3 * batch))$keys$args"
  done
}
# measure FILE: instructions per acquire of one round.
measure() {
  local sha n
  sha=$(cli script load "$(cat "$1")")
  cli flushall >/dev/null
  calls "$sha" t | cli >/dev/null # creates the keys
  callgrind_control -z "$pid" >/dev/null 2>&1
  calls "$sha" t | cli >"$dir/reply"
  callgrind_control -d "$pid" >/dev/null 2>&1
  # A variant that fails measures a script that stopped part way: a
  # batch's error replies are its tenants' lines (user_script:...), a
  # single call's an ERR.
  local failed
  if failed=$(grep -m1 -E 'user_script|^ERR|^\(error\)' "$dir/reply"); then
    echo "acquire-parts: $1 fails: $failed" >&2
    exit 1
  fi
  n=$(ls -t "$dir"/cg.out.* | head -1)
  awk -v n=$((batches * batch)) '/^(summary|totals):/{printf "%.0f", $2 / n; exit}' "$n"
  mv "$n" "$dir/last"
}

echo "redis $(cli info server | tr -d '\r' | awk -F: '/^redis_version:/{print $2}') under callgrind, $batch acquires of one tenant per call, $batches calls"
base=$(measure "$dir/trivial.lua")
echo "trivial script (return 1) with the same keys and arguments: $base instructions per acquire"
for shape in steady round; do
  full=$(measure "$dir/$shape.full.lua")
  printf '%-6s %-22s %8s instructions per acquire\n' "$shape" full "$full"
  for f in "$dir/$shape".no_*.lua; do
    name=$(basename "$f" .lua)
    name=${name#"$shape".}
    v=$(measure "$f")
    awk -v s="$shape" -v n="$name" -v v="$v" -v full="$full" -v us="$usPerCall" \
      'BEGIN{d=full-v; printf "%-6s %-22s %8d  part: %7d (%4.1f %%)", s, n, v, d, 100*d/full; if (us != "") printf "  ~%.1f µs", d*us/full; printf "\n"}'
  done
done
# Where the steady full script's instructions go, by C function
# (inclusive; the Lua VM's own functions are unnamed in a stripped build).
measure "$dir/steady.full.lua" >/dev/null
callgrind_annotate --inclusive=yes "$dir/last" 2>/dev/null | tr -d ',' |
  awk -v n=$((batches * batch)) '
    / ???:scriptCall /{printf "  redis.call dispatch and the commands (scriptCall): %d per acquire\n", $1/n}
    / ???:parseReply /{printf "  replies made into Lua values (parseReply): %d\n", $1/n}
    /strtod\.c:strtod /{printf "  tonumber of strings (strtod): %d\n", $1/n}
    /sprintf_chk\.c:__sprintf_chk /{printf "  string.format (sprintf): %d\n", $1/n}
  '

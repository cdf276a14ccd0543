#!/usr/bin/env bash
# Measures the Redis CPU of each script path of the lease protocol, and of
# redis_rate's GCRA script per decision, for the cost model of the
# fleet-scale simulation (internal/costmodel: its one table, Measured,
# keeps each case's smallest usec_per_call of several runs).
#
#   bash scripts/redis-cost.sh [requests per case, default 200000]
#
# It starts its own redis-server (no persistence) on a free loopback port,
# loads the scripts as the library sends them (lease/common.lua in front
# of each), and for each case resets INFO commandstats, runs
# redis-benchmark (50 clients, pipeline 16, as the syncer pipelines its
# calls), and prints one line:
#
#   case  usec_per_call (INFO commandstats)  cpu_us_per_call (INFO cpu)
#
# usec_per_call is the time Redis spent executing the command; the CPU
# column is the server process's user+sys CPU over the run divided by the
# calls, so it adds parsing, replies and the event loop at that pipeline
# depth. Figures vary by machine and load (up to 3x between runs on a
# shared 2-core machine): run it on a quiet machine, or several times.
set -euo pipefail

N=${1:-200000}
here=$(cd "$(dirname "$0")/.." && pwd)
lease=$here/lease

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
dir=$(mktemp -d)
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
  --dir "$dir" --pidfile "$dir/redis.pid" --logfile "$dir/redis.log"
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
cli() { redis-cli -p "$port" "$@"; }
for _ in $(seq 50); do cli ping >/dev/null 2>&1 && break; sleep 0.1; done

acq=$(cli script load "$(cat "$lease/common.lua" "$lease/acquire.lua")")
rel=$(cli script load "$(cat "$lease/common.lua" "$lease/release.lua")")
quo=$(cli script load "$(cat "$lease/common.lua" "$lease/quota.lua")")
# redis_rate v10's allowN script, from the Go module cache (the
# integration module requires it through the simulator).
rr_src=$(cd "$here/cmd/leasequota-sim" && go list -m -f '{{.Dir}}' github.com/go-redis/redis_rate/v10)/lua.go
rr=$(cli script load "$(awk '/^var allowN = redis.NewScript\(`/{f=1;next} f&&/^`\)/{exit} f' "$rr_src")")

cpu() { cli info cpu | awk -F: '/^used_cpu_(user|sys):/{s+=$2} END{printf "%.6f", s}'; }

# run NAME CMD KEYS...: one benchmark of the command, over random keys
# (each __rand_int__ is drawn from -r KEYSPACE).
run() {
  local name=$1 cmd=$2 keyspace=$3
  shift 3
  cli config resetstat >/dev/null
  local c0
  c0=$(cpu)
  redis-benchmark -p "$port" -q -n "$N" -c 50 -P 16 -r "$keyspace" "$@" >/dev/null
  local c1 stats calls usec
  c1=$(cpu)
  stats=$(cli info commandstats | tr -d '\r' | grep "^cmdstat_$cmd:")
  calls=$(sed -E 's/^cmdstat_[a-z]+:calls=([0-9]+).*/\1/' <<<"$stats")
  usec=$(sed -E 's/.*usec_per_call=([0-9.]+).*/\1/' <<<"$stats")
  # A case whose calls fail prices a script that stopped part way.
  if grep -q -E 'failed_calls=[1-9]' <<<"$stats"; then
    echo "redis-cost: $name: calls failed ($stats)" >&2
    exit 1
  fi
  awk -v n="$name" -v u="$usec" -v c0="$c0" -v c1="$c1" -v k="$calls" \
    'BEGIN{printf "%-28s usec_per_call=%6.2f  cpu_us_per_call=%6.2f  calls=%d\n", n, u, (c1-c0)*1e6/k, k}'
}

# prefill N: every tenant {f:K}, K = 0..999 as redis-benchmark writes
# __rand_int__ (12 digits), gets N instances in its registry, i0..i(N-1),
# with a window of an hour, so the benchmark (as i0) finds N. Each
# __rand_int__ of a command is drawn on its own, so a call's registry is
# another tenant's than its bucket: all have N entries, which is what
# the script's cost depends on.
prefill() {
  local n=$1
  cli flushall >/dev/null
  for t in $(seq 0 999); do
    for i in $(seq 0 $((n - 1))); do
      printf 'EVALSHA %s 3 {f:%012d} {f:%012d}:i {f:%012d}:q 1e9 1073741824 10 i%d 3600000 100\n' "$acq" "$t" "$t" "$t" "$i"
    done
  done | cli >/dev/null
}

echo "redis $(cli info server | tr -d '\r' | awk -F: '/^redis_version:/{print $2}'), $N calls per case, 50 clients, pipeline 16"

# acquire granted in full: a bucket that never runs dry, registry of 1.
run acquire_full evalsha 100000 EVALSHA "$acq" 3 '{t:__rand_int__}' '{t:__rand_int__}:i' '{t:__rand_int__}:q' 1e9 1073741824 10 bench 2100 100
# acquire granted in full from a bucket that never refills to full
# (rate 1/s, burst 1e9, 200 calls per key): its level history holds all 8
# entries, which every acquire reads and writes (common.lua), where a
# bucket always full keeps 1. Not in the cost table (the model does not
# know a bucket's history): it bounds what a longer history adds.
cli flushall >/dev/null
run acquire_full_history8 evalsha 1000 EVALSHA "$acq" 3 '{h:__rand_int__}' '{h:__rand_int__}:i' '{h:__rand_int__}:q' 1 1000000000 10 bench 2100 100
cli hlen '{h:000000000007}' | sed "s/^/  bucket fields after the run: /"
# acquire of an empty bucket: burst 1, refilling once in 1000 s.
cli flushall >/dev/null
run acquire_empty evalsha 1000 EVALSHA "$acq" 3 '{e:__rand_int__}' '{e:__rand_int__}:i' '{e:__rand_int__}:q' 0.001 1 10 bench 2100 100
# acquire with N instances in the registry (granted in full).
for n in 1 16 32; do
  prefill "$n"
  run "acquire_registry_$n" evalsha 1000 EVALSHA "$acq" 3 '{f:__rand_int__}' '{f:__rand_int__}:i' '{f:__rand_int__}:q' 1e9 1073741824 10 i0 3600000 100
  cli hlen '{f:000000000007}:i' | sed "s/^/  registry entries after the run: /"
done
cli flushall >/dev/null
# release with a release id (every syncer release carries one), naming no
# grant: credits against the history of a missing bucket.
run release evalsha 100000 EVALSHA "$rel" 3 '{t:__rand_int__}' '{t:__rand_int__}:r' '{t:__rand_int__}:q' 1e9 1073741824 5 10 0 'rid:__rand_int__' 60000
# override read (no override stored).
run override_read evalsha 100000 EVALSHA "$quo" 2 '{t:__rand_int__}' '{t:__rand_int__}:q' get
# version poll.
cli set 'leasequota:quota-version' 7 >/dev/null
run version_get get 1 GET 'leasequota:quota-version'
# redis_rate GCRA: allowed (rate 1e6/s, never limited) and denied (rate
# 1/1000 s, burst 1: every call after the first is denied).
cli flushall >/dev/null
run redis_rate_allowed evalsha 100000 EVALSHA "$rr" 1 'rate:{t:__rand_int__}' 1000000 1000000 1 1
run redis_rate_denied evalsha 1000 EVALSHA "$rr" 1 'rate:{d:__rand_int__}' 1 1 1000 1

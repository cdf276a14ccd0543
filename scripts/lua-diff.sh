#!/usr/bin/env bash
# Checks that two releases' scripts compute the same: replies, keys,
# fields, values and TTLs (scripts/lua-diff.py), on two redis-servers of
# their own, for a few seeds.
#
#   bash scripts/lua-diff.sh <lease dir A> <lease dir B> [seeds, default "1 2 3 4"] [steps, default 3000]
#
# e.g. the scripts of a commit against the working tree's:
#   mkdir /tmp/old && git archive HEAD~1 lease | tar -x -C /tmp/old
#   bash scripts/lua-diff.sh /tmp/old/lease lease
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
a=$1 b=$2 seeds=${3:-1 2 3 4} steps=${4:-3000}
dir=$(mktemp -d)
ports=()
for i in 1 2; do
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
    --dir "$dir" --pidfile "$dir/redis$i.pid" --logfile "$dir/redis$i.log" --dbfilename "dump$i.rdb"
  ports+=("$port")
done
trap 'for p in "${ports[@]}"; do redis-cli -p "$p" shutdown nosave >/dev/null 2>&1 || true; done; rm -rf "$dir"' EXIT
for p in "${ports[@]}"; do
  for _ in $(seq 50); do redis-cli -p "$p" ping >/dev/null 2>&1 && break; sleep 0.1; done
done
for seed in $seeds; do
  python3 "$here/lua-diff.py" "$a" "$b" "${ports[0]}" "${ports[1]}" "$seed" "$steps"
done

#!/usr/bin/env bash
# Makes sure the tests will find a Redis (see internal/redisserver):
# REDIS_ADDR, or a redis-server on PATH. When there is neither, installs
# redis-server with the system's package manager and says so. A Docker
# daemon is not enough: only integration/redistest falls back to a
# container, and the library's tests, which start and stop their own
# servers, need redis-server.
#
# The cluster and Sentinel tests also need redis-cli (redis-cli --cluster
# create/reshard) next to redis-server; sentinels run as
# redis-server --sentinel, so no separate redis-sentinel package is
# needed. When redis-server is there but redis-cli is not, it is
# installed too.
set -euo pipefail

sudo=""
need_root() {
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
      sudo="sudo"
    else
      echo "redis: $1, not root and no sudo: install it or set REDIS_ADDR" >&2
      exit 1
    fi
  fi
}

# install_redis installs the package holding redis-server (or, with
# "cli", redis-cli) with the first known package manager.
install_redis() {
  local what=$1 deb=redis-server
  [ "$what" = cli ] && deb=redis-tools
  if command -v apt-get >/dev/null 2>&1; then
    echo "redis: $what not found; installing $deb with apt-get (apt-get update first)"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$deb" >/dev/null
  elif command -v dnf >/dev/null 2>&1; then
    echo "redis: $what not found; installing redis with dnf"
    $sudo dnf install -y -q redis
  elif command -v apk >/dev/null 2>&1; then
    echo "redis: $what not found; installing redis with apk"
    $sudo apk add --quiet redis
  elif command -v brew >/dev/null 2>&1; then
    echo "redis: $what not found; installing redis with brew"
    brew install redis
  else
    echo "redis: $what not found and no known package manager: install it or set REDIS_ADDR" >&2
    exit 1
  fi
}

# ensure_cli installs redis-cli when redis-server is there without it.
ensure_cli() {
  if ! command -v redis-cli >/dev/null 2>&1; then
    need_root "no redis-cli for the cluster tests"
    install_redis cli
    command -v redis-cli >/dev/null 2>&1 || { echo "redis: install did not put redis-cli on PATH" >&2; exit 1; }
  fi
}

if [ -n "${REDIS_ADDR:-}" ]; then
  echo "redis: using REDIS_ADDR=$REDIS_ADDR"
  command -v redis-server >/dev/null 2>&1 && ensure_cli
  exit 0
fi
if command -v redis-server >/dev/null 2>&1; then
  echo "redis: using $(command -v redis-server) ($(redis-server --version | awk '{print $3}'))"
  ensure_cli
  exit 0
fi
need_root "no redis-server"
install_redis redis-server
# Debian's package starts a system service on 6379; the tests start their
# own servers on free ports and do not use it.
command -v redis-server >/dev/null 2>&1 || { echo "redis: install did not put redis-server on PATH" >&2; exit 1; }
ensure_cli
echo "redis: installed $(redis-server --version | awk '{print $3}')"

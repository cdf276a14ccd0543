#!/usr/bin/env bash
# Makes sure the integration harness will find a Redis (see
# integration/redistest): REDIS_ADDR, a redis-server on PATH, or a Docker
# daemon. When there is none, installs redis-server with the system's
# package manager and says so.
set -euo pipefail

if [ -n "${REDIS_ADDR:-}" ]; then
  echo "redis: using REDIS_ADDR=$REDIS_ADDR"
  exit 0
fi
if command -v redis-server >/dev/null 2>&1; then
  echo "redis: using $(command -v redis-server) ($(redis-server --version | awk '{print $3}'))"
  exit 0
fi
if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
  echo "redis: no redis-server on PATH; tests will start a container through testcontainers-go"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo="sudo"
  else
    echo "redis: no redis-server, no Docker daemon, not root and no sudo: install redis-server or set REDIS_ADDR" >&2
    exit 1
  fi
fi
if command -v apt-get >/dev/null 2>&1; then
  echo "redis: redis-server not found; installing it with apt-get (apt-get update first)"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server >/dev/null
elif command -v dnf >/dev/null 2>&1; then
  echo "redis: redis-server not found; installing it with dnf"
  $sudo dnf install -y -q redis
elif command -v apk >/dev/null 2>&1; then
  echo "redis: redis-server not found; installing it with apk"
  $sudo apk add --quiet redis
elif command -v brew >/dev/null 2>&1; then
  echo "redis: redis-server not found; installing it with brew"
  brew install redis
else
  echo "redis: redis-server not found and no known package manager: install it or set REDIS_ADDR" >&2
  exit 1
fi
# Debian's package starts a system service on 6379; the tests start their
# own servers on free ports and do not use it.
command -v redis-server >/dev/null 2>&1 || { echo "redis: install did not put redis-server on PATH" >&2; exit 1; }
echo "redis: installed $(redis-server --version | awk '{print $3}')"

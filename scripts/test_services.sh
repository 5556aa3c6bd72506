#!/usr/bin/env bash
# What the test suite needs besides the Python environment (idempotent):
# Debian's Chromium for the dashboard's browser tests, docker-compose to validate the compose
# file, and the local PostgreSQL and Redis
# servers the integration tests talk to (started if they are installed but stopped).
set -euo pipefail

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo -n "$@"; else return 1; fi; }

if [ ! -x /usr/bin/chromium ] && command -v apt-get >/dev/null; then
    echo "installing chromium (browser tests)"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null \
        || { as_root apt-get update -q >/dev/null && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null; } \
        || echo "warning: chromium could not be installed; browser tests will be skipped" >&2
fi

if ! command -v docker-compose >/dev/null && ! docker compose version >/dev/null 2>&1 && command -v apt-get >/dev/null; then
    echo "installing docker-compose (validates docker-compose.yml; no engine is needed)"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker-compose >/dev/null \
        || echo "warning: docker-compose could not be installed; the compose check will be skipped" >&2
fi

if command -v pg_isready >/dev/null && ! pg_isready -h 127.0.0.1 -p 5432 -q; then
    echo "starting PostgreSQL"
    as_root pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start || true
fi
if command -v redis-cli >/dev/null && ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
    echo "starting Redis"
    as_root redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
        --dir /var/lib/redis --logfile /var/log/redis/ci.log || true
fi

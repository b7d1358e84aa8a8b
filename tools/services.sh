#!/usr/bin/env bash
# Start the PostgreSQL and Redis servers the tests use, on 127.0.0.1, where they are not running.
# Idempotent: a server that already answers is left alone. Addresses can be overridden with
# TS_TEST_POSTGRES_DSN / TS_TEST_REDIS_URL (then nothing is started for that service).
set -u

pg_up() { pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; }
redis_up() { redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG; }

if [ -z "${TS_TEST_POSTGRES_DSN:-}" ]; then
  if ! pg_up; then
    if command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
      echo "services: starting PostgreSQL"
      pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
      for _ in $(seq 1 30); do pg_up && break; sleep 1; done
    fi
    pg_up && echo "services: PostgreSQL is up" || echo "services: WARNING PostgreSQL is not reachable on 127.0.0.1:5432"
  else
    echo "services: PostgreSQL already running"
  fi
fi

if [ -z "${TS_TEST_REDIS_URL:-}" ]; then
  if ! redis_up; then
    if command -v redis-server >/dev/null 2>&1; then
      echo "services: starting Redis"
      mkdir -p /var/lib/redis /var/log/redis 2>/dev/null || true
      redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
        --dir /var/lib/redis --logfile /var/log/redis/ci.log || true
      for _ in $(seq 1 30); do redis_up && break; sleep 1; done
    fi
    redis_up && echo "services: Redis is up" || echo "services: WARNING Redis is not reachable on 127.0.0.1:6379"
  else
    echo "services: Redis already running"
  fi
fi

# The Studio's browser tests drive Debian's Chromium (never a browser download).
if [ ! -x /usr/bin/chromium ]; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = "0" ]; then
    echo "services: installing Debian's chromium for the browser tests"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) \
      >/tmp/tensorsketch-chromium-install.log 2>&1 \
      || echo "services: WARNING could not install chromium (see /tmp/tensorsketch-chromium-install.log)"
  else
    echo "services: WARNING /usr/bin/chromium is missing; the browser tests will be skipped"
  fi
else
  echo "services: chromium present"
fi
exit 0

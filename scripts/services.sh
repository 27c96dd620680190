#!/usr/bin/env bash
# Make PostgreSQL (127.0.0.1:5432, database `flywheel`) and Redis (127.0.0.1:6379) answer for the tests:
# connect to running ones, start installed ones, or install Debian's packages and start them.
set -euo pipefail
here=$(dirname "$0")

wait_for() {  # wait_for DESCRIPTION COMMAND...
  local what=$1; shift
  for _ in $(seq 60); do "$@" >/dev/null 2>&1 && return 0; sleep 0.5; done
  echo "$what did not come up" >&2; return 1
}

postgres_up() { pg_isready -q -h 127.0.0.1 -p 5432; }
if ! command -v pg_isready >/dev/null || ! postgres_up; then
  if ! ls -d /etc/postgresql/*/main >/dev/null 2>&1; then
    "$here/apt-install.sh" postgresql
    fresh_postgres=1
  fi
  version=$(ls /etc/postgresql | sort -V | tail -n 1)
  pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
  wait_for PostgreSQL postgres_up
  if [ "${fresh_postgres:-0}" = 1 ]; then
    su postgres -c "psql -qc \"ALTER USER postgres PASSWORD 'postgres'\""
  fi
fi
export PGPASSWORD=${PGPASSWORD:-postgres}
if ! psql -h 127.0.0.1 -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'flywheel'" | grep -q 1; then
  createdb -h 127.0.0.1 -U postgres flywheel
fi

redis_up() { redis-cli -h 127.0.0.1 -p 6379 ping | grep -q PONG; }
if ! command -v redis-cli >/dev/null || ! redis_up; then
  command -v redis-server >/dev/null || "$here/apt-install.sh" redis-server
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
  wait_for Redis redis_up
fi
echo "PostgreSQL and Redis are answering on 127.0.0.1"

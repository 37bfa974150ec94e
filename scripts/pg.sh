#!/usr/bin/env bash
# Start or stop a throwaway PostgreSQL cluster for the tests: loopback only, trust auth,
# in a temporary directory. `start` prints the DATABASE_URL to use.
#   scripts/pg.sh start   ->  postgres://postgres@127.0.0.1:54329/postgres
#   scripts/pg.sh stop
set -euo pipefail
cmd=${1:-start}
dir=${AVATARS_PG_DIR:-/tmp/avatars-pg}
port=${AVATARS_PG_PORT:-54329}
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
if [ -z "$bin" ] && [ "$cmd" = start ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    # A fresh machine: get Debian's server binaries (as root only; nothing else is touched).
    echo "Installing Debian's postgresql for the PostgreSQL suite..." >&2
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
    bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
fi
if [ -z "$bin" ]; then
    echo "No PostgreSQL server binaries under /usr/lib/postgresql. Fix: sudo apt-get install postgresql" >&2
    exit 1
fi

# The server refuses to run as root: run it as the postgres user when we are root.
as_owner() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case "$cmd" in
start)
    if [ -f "$dir/data/postmaster.pid" ]; then
        as_owner "$bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
    fi
    rm -rf "$dir"
    mkdir -p "$dir"
    [ "$(id -u)" = 0 ] && chown postgres "$dir"
    as_owner "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 >/dev/null
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c max_connections=200 -c fsync=on -c synchronous_commit=on" \
        start >/dev/null
    echo "postgres://postgres@127.0.0.1:$port/postgres"
    ;;
stop)
    if [ -d "$dir/data" ]; then
        as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null || true
    fi
    rm -rf "$dir"
    ;;
*)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac

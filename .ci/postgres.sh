#!/usr/bin/env bash
# A throwaway PostgreSQL server on loopback for the tests of shared Optuna studies.
#   .ci/postgres.sh start   installs Debian's server if missing, starts it, prints its URL
#   .ci/postgres.sh stop    stops it and removes its data folder
set -euo pipefail
PORT=${AUTOTUNE_TEST_POSTGRES_PORT:-54329}
STATE=/tmp/autotune-ci-postgres.dir

case "${1:-}" in
start)
    if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
        apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -qq postgresql >/dev/null
    fi
    BIN=$(dirname "$(ls /usr/lib/postgresql/*/bin/initdb | sort -V | tail -1)")
    DATA=$(mktemp -d /tmp/autotune-pg.XXXXXX)
    echo "$DATA" >"$STATE"
    RUN=(runuser -u postgres --)
    [ "$(id -u)" = 0 ] || RUN=()
    [ "$(id -u)" = 0 ] && chown postgres "$DATA"
    "${RUN[@]}" "$BIN/initdb" -D "$DATA" -A trust -U postgres >"$DATA.initdb.log"
    "${RUN[@]}" "$BIN/pg_ctl" -D "$DATA" -l "$DATA/server.log" -w \
        -o "-c listen_addresses=127.0.0.1 -p $PORT -k $DATA" start >/dev/null
    echo "postgresql+psycopg://postgres@127.0.0.1:$PORT/postgres"
    ;;
stop)
    [ -f "$STATE" ] || exit 0
    DATA=$(cat "$STATE")
    BIN=$(dirname "$(ls /usr/lib/postgresql/*/bin/pg_ctl | sort -V | tail -1)")
    RUN=(runuser -u postgres --)
    [ "$(id -u)" = 0 ] || RUN=()
    "${RUN[@]}" "$BIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null || true
    rm -rf "$DATA" "$DATA.initdb.log" "$STATE"
    ;;
*)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac

#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the tests: `start` prints its URL, `stop` removes it.
#
#   scripts/ci_postgres.sh start    # installs Debian's postgresql if missing, starts a cluster on
#                                   # 127.0.0.1, creates user/database tuner, prints
#                                   # postgresql+psycopg2://tuner:tuner@127.0.0.1:PORT/tuner
#   scripts/ci_postgres.sh url      # prints the URL of the running cluster
#   scripts/ci_postgres.sh pause    # stops the server but keeps its data (outage tests)
#   scripts/ci_postgres.sh resume   # starts it again on the same port
#   scripts/ci_postgres.sh status   # exit 0 if it runs
#   scripts/ci_postgres.sh stop     # stops it and removes every file it made
#
# Environment: TUNER_PG_DIR (state folder, default /tmp/tuner-ci-postgres-$UID), TUNER_PG_PORT (fixed port;
# default: a free one), TUNER_PG_URL_FILE (also write the URL there).
# Every command is idempotent: `start` on a running cluster prints its URL, `stop` on none does nothing.
set -euo pipefail

DIR="${TUNER_PG_DIR:-/tmp/tuner-ci-postgres-$(id -u)}"
DATA="$DIR/data"
SOCK="$DIR/sock"
LOG="$DIR/server.log"

say() { echo "ci_postgres: $*" >&2; }

bindir() {
    local initdb
    initdb=$(ls -1d /usr/lib/postgresql/*/bin/initdb 2>/dev/null | sort -V | tail -n 1 || true)
    if [[ -z "$initdb" ]]; then
        return 1
    fi
    dirname "$initdb"
}

install_postgres() {
    if bindir >/dev/null; then
        return 0
    fi
    if [[ $(id -u) -ne 0 ]]; then
        say "PostgreSQL is not installed and this is not root: apt-get install postgresql"
        exit 1
    fi
    say "installing Debian's postgresql"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q --no-install-recommends postgresql >/dev/null 2>&1 || {
        apt-get update -q >/dev/null
        apt-get install -y -q --no-install-recommends postgresql >/dev/null
    }
    # The package starts a system cluster on 5432; ours is separate, and theirs is none of our business.
    bindir >/dev/null || { say "postgresql installed but no initdb found"; exit 1; }
}

# Run a PostgreSQL program as the owner of the cluster: the postgres user when we are root
# (initdb and the server refuse to run as root), ourselves otherwise.
as_owner() {
    if [[ $(id -u) -eq 0 ]]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

free_port() {
    python3 - <<'EOF'
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()
EOF
}

running() {
    [[ -f "$DATA/postmaster.pid" ]] && as_owner "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1
}

url() {
    echo "postgresql+psycopg2://tuner:tuner@127.0.0.1:$(cat "$DIR/port")/tuner"
}

start_server() {
    local port
    port=$(cat "$DIR/port")
    # No fsync: a throwaway cluster for tests; fast start-up and commits.
    as_owner "$BIN/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 -s start \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $SOCK -c fsync=off -c synchronous_commit=off \
            -c full_page_writes=off -c max_connections=200" >/dev/null
}

psql_admin() {
    as_owner "$BIN/psql" -v ON_ERROR_STOP=1 -q -h "$SOCK" -p "$(cat "$DIR/port")" -U postgres -d postgres "$@"
}

cmd_start() {
    install_postgres
    BIN=$(bindir)
    if running; then
        say "already running in $DIR"
        emit_url
        return 0
    fi
    if [[ -d "$DIR" ]]; then
        # Left over from a run that did not stop it (or a paused one): start afresh.
        rm -rf "$DIR"
    fi
    mkdir -p "$DATA" "$SOCK"
    echo "${TUNER_PG_PORT:-$(free_port)}" >"$DIR/port"
    if [[ $(id -u) -eq 0 ]]; then
        chown -R postgres: "$DIR"
    fi
    as_owner "$BIN/initdb" -D "$DATA" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
        --encoding=UTF8 --no-instructions >/dev/null
    start_server
    psql_admin -c "CREATE ROLE tuner LOGIN PASSWORD 'tuner' CREATEDB"
    psql_admin -c "CREATE DATABASE tuner OWNER tuner"
    say "started PostgreSQL $("$BIN/postgres" --version | awk '{print $3}') in $DIR on port $(cat "$DIR/port")"
    emit_url
}

emit_url() {
    if [[ -n "${TUNER_PG_URL_FILE:-}" ]]; then
        url >"$TUNER_PG_URL_FILE"
    fi
    url
}

cmd_stop() {
    if [[ ! -d "$DIR" ]]; then
        return 0
    fi
    if BIN=$(bindir) && running; then
        as_owner "$BIN/pg_ctl" -D "$DATA" -m immediate -w -t 30 -s stop >/dev/null || true
    fi
    rm -rf "$DIR"
    say "stopped and removed $DIR"
}

cmd_pause() {
    BIN=$(bindir)
    [[ -d "$DATA" ]] || { say "no cluster in $DIR"; exit 1; }
    if running; then
        as_owner "$BIN/pg_ctl" -D "$DATA" -m fast -w -t 30 -s stop >/dev/null
    fi
}

cmd_resume() {
    BIN=$(bindir)
    [[ -d "$DATA" ]] || { say "no cluster in $DIR"; exit 1; }
    if ! running; then
        start_server
    fi
}

case "${1:-}" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    pause) cmd_pause ;;
    resume) cmd_resume ;;
    url) [[ -f "$DIR/port" ]] || { say "no cluster in $DIR"; exit 1; }; url ;;
    status) BIN=$(bindir) && running ;;
    *) echo "usage: $0 start|stop|url|pause|resume|status" >&2; exit 2 ;;
esac

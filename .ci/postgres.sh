# shellcheck shell=bash
# Starts a private, throw-away PostgreSQL for the durable-queue tests and exports
# TEST_DATABASE_URL. Source it (do not execute it): `source .ci/postgres.sh`.
#
# - Installs PostgreSQL with apt only if no server binaries are present.
# - Runs initdb/pg_ctl in a fresh temp directory; as root (CI) through `runuser -u postgres`,
#   because initdb refuses to run as root.
# - Listens on 127.0.0.1 only, on a free port, with trust auth (loopback only) and fsync off:
#   a test database, never a real one.
# - Registers an EXIT trap that stops the server and deletes the directory (chained after any
#   EXIT trap the caller already had).

ci_postgres_log() { echo "postgres.sh: $*" >&2; }

ci_postgres_start() {
    local pgbin initdb_bin
    initdb_bin=$(ls -1 /usr/lib/postgresql/*/bin/initdb 2>/dev/null | sort -V | tail -n 1)
    if [ -z "$initdb_bin" ]; then
        ci_postgres_log "PostgreSQL server not found; installing it with apt"
        if [ "$(id -u)" -ne 0 ]; then
            ci_postgres_log "need root to install PostgreSQL; install the 'postgresql' package"
            return 1
        fi
        DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null || {
            ci_postgres_log "apt-get install postgresql failed"
            return 1
        }
        initdb_bin=$(ls -1 /usr/lib/postgresql/*/bin/initdb 2>/dev/null | sort -V | tail -n 1)
        [ -n "$initdb_bin" ] || { ci_postgres_log "initdb still missing after install"; return 1; }
    fi
    pgbin=$(dirname "$initdb_bin")

    local as_pg=()
    if [ "$(id -u)" -eq 0 ]; then
        as_pg=(runuser -u postgres --)
    fi

    CI_PG_BIN=$pgbin
    CI_PG_DIR=$(mktemp -d /tmp/ci-pg.XXXXXX) || return 1
    if [ "$(id -u)" -eq 0 ]; then
        chown postgres:postgres "$CI_PG_DIR" || return 1
    fi
    chmod 700 "$CI_PG_DIR"
    CI_PG_AS=("${as_pg[@]}")

    if ! "${as_pg[@]}" "$pgbin/initdb" -D "$CI_PG_DIR/data" -U postgres --auth=trust \
        -E UTF8 --no-locale >"$CI_PG_DIR/initdb.log" 2>&1; then
        ci_postgres_log "initdb failed:"
        cat "$CI_PG_DIR/initdb.log" >&2
        return 1
    fi

    # A free port: skip ports something already listens on; retry if we lose a race.
    local port tries=0 started=0
    port=$((20000 + RANDOM % 20000))
    while [ $tries -lt 20 ]; do
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            if "${as_pg[@]}" "$pgbin/pg_ctl" -D "$CI_PG_DIR/data" -l "$CI_PG_DIR/server.log" \
                -w -t 60 -o "-p $port -k $CI_PG_DIR -c listen_addresses=127.0.0.1 -c fsync=off \
                -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
                start >/dev/null 2>&1; then
                started=1
                break
            fi
        fi
        port=$((port + 1))
        tries=$((tries + 1))
    done
    if [ $started -ne 1 ]; then
        ci_postgres_log "could not start PostgreSQL; server log:"
        cat "$CI_PG_DIR/server.log" >&2 2>/dev/null
        rm -rf "$CI_PG_DIR"
        return 1
    fi
    CI_PG_PORT=$port

    # Stop the server when the sourcing shell exits, after any EXIT trap it already had.
    local previous
    previous=$(trap -p EXIT)
    previous=${previous#trap -- \'}
    previous=${previous%\' EXIT}
    CI_PG_PREVIOUS_EXIT_TRAP=$previous
    trap 'ci_postgres_stop; eval "$CI_PG_PREVIOUS_EXIT_TRAP"' EXIT

    if ! "$pgbin/createdb" -h 127.0.0.1 -p "$port" -U postgres retry_test; then
        ci_postgres_log "createdb failed"
        return 1
    fi
    export TEST_DATABASE_URL="postgres://postgres@127.0.0.1:$port/retry_test"
    ci_postgres_log "PostgreSQL $("$pgbin/postgres" --version | awk '{print $3}') ready: $TEST_DATABASE_URL"
}

ci_postgres_stop() {
    if [ -n "${CI_PG_DIR:-}" ] && [ -d "$CI_PG_DIR" ]; then
        "${CI_PG_AS[@]}" "$CI_PG_BIN/pg_ctl" -D "$CI_PG_DIR/data" -m fast -w stop >/dev/null 2>&1
        rm -rf "$CI_PG_DIR"
        ci_postgres_log "PostgreSQL on port ${CI_PG_PORT:-?} stopped"
    fi
    CI_PG_DIR=
}

ci_postgres_start

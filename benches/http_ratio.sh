#!/usr/bin/env bash
# Hot paths of the release server under `wrk -t2 -c32`, on PostgreSQL with Redis and on
# SQLite, beside the database's own ceiling for the same store calls (benches/sql_ceiling.rs) and
# for one primary-key SELECT (pgbench), and, with PEER=1, the
# reference stack of ../shared/perf-reference on the same machine and database server.
#
#   benches/http_ratio.sh            # needs wrk (apt-get install wrk); PostgreSQL and Redis up
#   PEER=1 benches/http_ratio.sh     # also the reference (python venv with its packages)
#
# Settings: DURATION (10s), CONNECTIONS (32), PG (postgres://postgres@127.0.0.1:5432),
# REDIS (redis://127.0.0.1:6379), PEER_VENV (/tmp/peer-venv); BIN (a server binary to measure
# instead of building this checkout's, e.g. to compare two builds in one sitting) and
# CEILING=0 (skip the database ceilings).
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION="${DURATION:-10s}"
CONNECTIONS="${CONNECTIONS:-32}"
PG="${PG:-postgres://postgres@127.0.0.1:5432}"
REDIS="${REDIS:-redis://127.0.0.1:6379}"
PORT=18080
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/marketplace-target}"
command -v wrk >/dev/null || { echo "wrk is required (apt-get install wrk)" >&2; exit 1; }

CEILING="${CEILING:-1}"
if [ -z "${BIN:-}" ]; then
  cargo build --release --quiet
  BIN="$CARGO_TARGET_DIR/release/marketplace"
fi
[ "$CEILING" = 1 ] && cargo bench --no-run --quiet --bench sql_ceiling 2>/dev/null
WORK="$(mktemp -d)"
SERVER=""
cleanup() { [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT

json_field() { python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }

# wrk's summary as one line: req/s, p50, p99 (after a 2 s warm-up that fills the pools).
load() {
  local label="$1"; shift
  local out
  wrk -t2 -c"$CONNECTIONS" -d2s "$@" >/dev/null
  out="$(wrk -t2 -c"$CONNECTIONS" -d"$DURATION" --latency "$@")"
  local rps p50 p99 errors
  rps="$(awk '/Requests\/sec/ {print $2}' <<<"$out")"
  p50="$(awk '$1 == "50%" {print $2}' <<<"$out")"
  p99="$(awk '$1 == "99%" {print $2}' <<<"$out")"
  errors="$(awk '/Non-2xx/ {print $5}' <<<"$out")"
  printf '  %-34s %10s req/s   p50 %8s   p99 %8s   non-2xx %s\n' "$label" "$rps" "$p50" "$p99" "${errors:-0}"
}

start_server() {
  local database="$1" redis="$2"
  rm -rf "$WORK/data"
  env -i PATH="$PATH" HOME="$HOME" BIND_ADDR="127.0.0.1:$PORT" DATA_DIR="$WORK/data" \
    DATABASE_URL="$database" ${redis:+REDIS_URL="$redis"} CACHE_PREFIX="bench:$RANDOM:" \
    RATE_LIMIT_PER_MINUTE=0 LOGIN_RATE_LIMIT_MAX_ATTEMPTS_PER_USER=1000000 \
    LOGIN_RATE_LIMIT_MAX_ATTEMPTS_PER_IP=1000000 RUST_LOG="${RUST_LOG:-info}" \
    "$BIN" serve >"$WORK/server.log" 2>&1 &
  SERVER=$!
  for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && return 0
    sleep 0.1
  done
  echo "the server did not start:" >&2; cat "$WORK/server.log" >&2; exit 1
}

stop_server() { kill "$SERVER"; wait "$SERVER" 2>/dev/null || true; SERVER=""; }

# A company with a verified profile and a project: its token and the project's id.
prepare() {
  local base="http://127.0.0.1:$PORT"
  "$BIN" create-admin --email bench-admin@example.com --username bench_admin --password 'Bench123!x' \
    >/dev/null 2>&1 || true
  local reg token admin profile project
  reg="$(curl -sf -H 'Content-Type: application/json' -d '{"email":"bench@example.com","username":"bench_co","password":"Bench123!x","roles":["empresa"]}' "$base/api/auth/register")"
  # The standard login's bearer token (registration answers with a cookie session).
  token="$(curl -sf -H 'Content-Type: application/json' -d '{"username":"bench_co","password":"Bench123!x"}' "$base/api/auth/login" | json_field '["access_token"]')"
  admin="$(curl -sf -H 'Content-Type: application/json' -d '{"username":"bench_admin","password":"Bench123!x"}' "$base/api/auth/login" | json_field '["access_token"]')"
  profile="$(curl -sf -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
    -d '{"profile_type":"empresa","company_name":"Bench SL","full_name":"Bench"}' "$base/api/profiles/" | json_field '["id"]')"
  curl -sf -X PUT -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
    -d '{"tax_id":"B12345678","fiscal_name":"Bench SL","fiscal_address":"Calle Mayor 1","fiscal_postal_code":"28001","fiscal_city":"Madrid","fiscal_country":"ES","fiscal_type":"empresa"}' \
    "$base/api/profiles/$profile/fiscal-data" >/dev/null
  curl -sf -X PUT -H "Authorization: Bearer $admin" -H 'Content-Type: application/json' -d '{}' \
    "$base/api/admin/users/$(json_field '["user"]["id"]' <<<"$reg")/verify" >/dev/null
  curl -sf -X PUT -H "Authorization: Bearer $admin" -H 'Content-Type: application/json' \
    -d '{"email_verified":true}' "$base/api/admin/users/$(json_field '["user"]["id"]' <<<"$reg")" >/dev/null
  project="$(curl -sf -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
    -d '{"title":"Bench project","description":"Load","budget":1000,"deadline":"2099-01-01T00:00:00","skills_required":["Rust"],"project_type":"curated"}' \
    "$base/api/projects/" | json_field '["id"]')"
  echo "$token $project $(json_field '["user"]["id"]' <<<"$reg")"
}

# The same store calls on the same database without the server: the database's ceiling.
ceiling() {
  BENCH_SQL_DATABASE="$1" BENCH_USER_ID="$2" BENCH_PROJECT_ID="$3" BENCH_SECONDS="${DURATION%s}" \
    BENCH_CONCURRENCY="$CONNECTIONS" cargo bench --quiet --bench sql_ceiling 2>/dev/null | grep -v '^$'
}

run_target() {
  local label="$1" database="$2" redis="$3"
  start_server "$database" "$redis"
  # Database and cache paths export so `prepare`'s CLI calls reach the same database.
  export DATABASE_URL="$database"
  read -r token project user < <(prepare)
  echo "$label (release, WORKERS default, RUST_LOG=${RUST_LOG:-info})"
  load "GET /api/users/me" -H "Authorization: Bearer $token" "http://127.0.0.1:$PORT/api/users/me"
  load "GET /api/projects/{id} (company)" -H "Authorization: Bearer $token" "http://127.0.0.1:$PORT/api/projects/$project"
  load "unknown route" "http://127.0.0.1:$PORT/nowhere"
  stop_server
  unset DATABASE_URL
  if [ "$CEILING" = 1 ]; then ceiling "$database" "$user" "$project"; fi
}

# What the figures were measured on: two sittings 3× apart (issue #32) are compared only
# with this beside them.
echo "machine: $(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo) × $(nproc)," \
  "$(awk '/MemTotal/ {printf "%d GiB", $2 / 1048576}' /proc/meminfo), Linux $(uname -r)," \
  "load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "PostgreSQL: $(psql "$PG/postgres" -Atc 'SHOW server_version') with" \
  "$(psql "$PG/postgres" -Atc "SELECT string_agg(name || '=' || current_setting(name), ' ' ORDER BY name)
       FROM pg_settings WHERE name IN ('shared_buffers', 'work_mem', 'effective_cache_size',
         'synchronous_commit', 'max_connections', 'jit', 'random_page_cost', 'fsync')");" \
  "Redis $(redis-cli -u "$REDIS" INFO server 2>/dev/null | awk -F: '/^redis_version/ {print $2}' | tr -d '\r')"

DB="bench_$$"
psql "$PG/postgres" -qc "CREATE DATABASE $DB" >/dev/null
trap 'cleanup; psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $DB" >/dev/null 2>&1' EXIT
run_target "postgres + redis" "$PG/$DB" "$REDIS"
run_target "sqlite + memory" "sqlite:$WORK/bench.db" ""

if [ "$CEILING" = 1 ] && command -v pgbench >/dev/null; then
  echo "PostgreSQL ceiling: one primary-key SELECT per transaction (pgbench, same machine)"
  echo "SELECT id, email FROM users WHERE id = 1;" >"$WORK/select.sql"
  pgbench -n -c"$CONNECTIONS" -j2 -T"${DURATION%s}" -f "$WORK/select.sql" "$PG/$DB" 2>/dev/null \
    | awk '/tps|latency average/ {print "  " $0}'
fi

if [ "${PEER:-0}" = 1 ]; then
  VENV="${PEER_VENV:-/tmp/peer-venv}"
  PEER_DIR="$(cd ../shared/perf-reference && pwd)"
  psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS peer" -qc "CREATE DATABASE peer" >/dev/null
  (cd "$PEER_DIR" && "$VENV/bin/python" app.py >/dev/null 2>&1)
  (cd "$PEER_DIR" && "$VENV/bin/uvicorn" app:app --host 127.0.0.1 --port 19090 --workers 2 \
    --log-level warning >"$WORK/peer.log" 2>&1) &
  PEER_PID=$!
  for _ in $(seq 1 100); do curl -s http://127.0.0.1:19090/ >/dev/null && break; sleep 0.2; done
  ptoken="$(curl -s -X POST -H 'Content-Type: application/json' -d '{"username":"user1","password":"S3cure!Passw0rd"}' \
    http://127.0.0.1:19090/api/auth/login_secure | json_field '["access_token"]')"
  echo "reference (FastAPI, SQLAlchemy async, asyncpg; uvicorn --workers 2)"
  load "GET /api/users/me" -H "Authorization: Bearer $ptoken" http://127.0.0.1:19090/api/users/me
  load "GET /api/projects/1" -H "Authorization: Bearer $ptoken" http://127.0.0.1:19090/api/projects/1
  kill "$PEER_PID" 2>/dev/null; pkill -f "uvicorn app:app" 2>/dev/null || true
fi

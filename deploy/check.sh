#!/usr/bin/env bash
# Validates the deployment artifacts in deploy/ without a Docker daemon or a cluster:
#
#   env names   every FLAGEDGE_* variable the artifacts pass is one the programs read
#               (their --help lists each flag's variable)
#   compose     docker-compose `config` (schema, interpolation) + check_compose.py (services
#               fit together: ports, health checks, volumes, secrets, dependencies)
#   kubernetes  strict decoding into the Kubernetes API types + cross-references
#               (deploy/kubernetes/validate, its own Go module and tests)
#   systemd     `systemd-analyze verify` silent, `systemd-analyze security` exposure <= 2.0
#   tls         gen-dev-certs.sh writes a certificate that verifies against its CA
#   image       deploy/Dockerfile built with buildah, the image inspected (check-image.sh);
#               FLAGEDGE_SKIP_IMAGE=1 skips it
#
# Each check is also run once against a deliberately broken input and must fail on it, so
# that a check which stopped checking is noticed. Installs missing tools with apt-get.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "deploy-check: $*" >&2; }
fail() { log "FAIL: $*"; exit 1; }

# --- tools ---------------------------------------------------------------------------------
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
missing=()
command -v docker-compose >/dev/null || missing+=(docker-compose)
command -v systemd-analyze >/dev/null || missing+=(systemd)
python3 -c 'import yaml' 2>/dev/null || missing+=(python3-yaml)
command -v openssl >/dev/null || missing+=(openssl)
if [ "${FLAGEDGE_SKIP_IMAGE:-}" != 1 ] && [ "$(id -u)" -eq 0 ]; then
  command -v buildah >/dev/null || missing+=(buildah)
  /bin/busybox --list 2>/dev/null | grep -qx sh || missing+=(busybox-static)
fi
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  $SUDO apt-get -o DPkg::Lock::Timeout=300 update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=300 install -y -qq "${missing[@]}" >/dev/null
fi
command -v go >/dev/null || fail "Go is required"

tmp=$(mktemp -d /tmp/flagedge-deploy-check.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# --- the programs --------------------------------------------------------------------------
# Built as the Dockerfile builds them (static, -trimpath), so the image build reuses the cache.
log "building controlplane and edge"
mkdir -p "$tmp/bin"
CGO_ENABLED=0 go build -trimpath -o "$tmp/bin/controlplane" ./controlplane/cmd/controlplane
CGO_ENABLED=0 go build -trimpath -o "$tmp/bin/edge" ./edge/cmd/edge

# --- env names -----------------------------------------------------------------------------
# The variables each artifact hands to the programs (not compose's own ${...} variables).
artifact_env() {
  {
    sed -nE 's/^ +(FLAGEDGE_[A-Z0-9_]+):.*/\1/p' deploy/compose.yaml deploy/compose.nats.yaml
    sed -nE 's/^ *- name: (FLAGEDGE_[A-Z0-9_]+)$/\1/p' deploy/kubernetes/*.yaml
    sed -nE 's/^#? ?(FLAGEDGE_[A-Z0-9_]+)=.*/\1/p' deploy/systemd/*.env.example
    sed -nE 's/^Environment=(FLAGEDGE_[A-Z0-9_]+)=.*/\1/p' deploy/systemd/*.service
    sed -nE 's/^(ENV +| +)(FLAGEDGE_[A-Z0-9_]+)=.*/\2/p' deploy/Dockerfile
  } | sort -u
}
help=$({ "$tmp/bin/controlplane" serve --help; "$tmp/bin/edge" --help; } 2>&1 || true)
grep -q 'FLAGEDGE_HTTP_ADDR' <<<"$help" || fail "could not read the programs' --help"
check_env() { # names on stdin; prints the unknown ones and fails if there is any
  local bad=0 name
  while read -r name; do
    grep -qw "$name" <<<"$help" && continue
    echo "unknown $name"; bad=1
  done
  return $bad
}
names=$(artifact_env)
[ "$(wc -l <<<"$names")" -ge 10 ] || fail "found only $(wc -l <<<"$names") FLAGEDGE_* names in deploy/: the extraction is broken"
if ! out=$(check_env <<<"$names"); then
  fail "variables the programs do not read (see their --help):"$'\n'"$out"
fi
check_env <<<"FLAGEDGE_EDGE_ADRR" >/dev/null && fail "env check accepted a misspelt variable"
log "env: ok ($(wc -l <<<"$names") variables, all in the programs' --help)"

# --- compose -------------------------------------------------------------------------------
compose() { docker-compose -f "$1" --env-file "${2:-deploy/compose.env.example}" config 2>&1; }
out=$(compose deploy/compose.yaml) || fail "docker-compose config:"$'\n'"$out"
python3 deploy/check_compose.py <<<"$out" || fail "compose.yaml: see above"
# Negative controls: an unknown key, an unset password, two edges on one spool.
cp deploy/compose.yaml "$tmp/compose.yaml"
sed 's/^    stop_grace_period: 30s$/    stop_grace_periods: 30s/' deploy/compose.yaml > "$tmp/compose.yaml"
cmp -s deploy/compose.yaml "$tmp/compose.yaml" && fail "negative control did not change compose.yaml"
compose "$tmp/compose.yaml" >/dev/null && fail "docker-compose config accepted an unknown key"
: > "$tmp/empty.env"
compose deploy/compose.yaml "$tmp/empty.env" >/dev/null && fail "docker-compose config accepted an unset POSTGRES_PASSWORD"
sed 's/- edge-2-data:/- edge-1-data:/' deploy/compose.yaml > "$tmp/compose.yaml"
compose "$tmp/compose.yaml" | python3 deploy/check_compose.py 2>/dev/null && fail "check_compose accepted two edges on one spool volume"
# The event-log overlay, merged over compose.yaml as operators run it.
out=$(docker-compose -f deploy/compose.yaml -f deploy/compose.nats.yaml --env-file deploy/compose.env.example config 2>&1) \
  || fail "docker-compose config (with compose.nats.yaml):"$'\n'"$out"
python3 deploy/check_compose.py <<<"$out" || fail "compose.nats.yaml: see above"
grep -q 'FLAGEDGE_EVENT_LOG_URL: nats://nats-1:4222' <<<"$out" || fail "compose.nats.yaml does not point the programs at NATS"
sed 's/^  nats-1:$/  nats-1:\n    bogus_key: 1/' deploy/compose.nats.yaml > "$tmp/compose.nats.yaml"
docker-compose -f deploy/compose.yaml -f "$tmp/compose.nats.yaml" --env-file deploy/compose.env.example config >/dev/null 2>&1 \
  && fail "docker-compose config accepted an unknown key in compose.nats.yaml"
log "compose: ok"

# --- kubernetes ----------------------------------------------------------------------------
# Strict decoding and cross-references; its tests include the broken-manifest cases.
(cd deploy/kubernetes/validate && go mod tidy -diff && go vet ./... && go test -count=1 ./...) >"$tmp/k8s.log" 2>&1 \
  || { cat "$tmp/k8s.log" >&2; fail "kubernetes manifests"; }
log "kubernetes: ok"

# --- systemd -------------------------------------------------------------------------------
# verify needs ExecStart's binary to exist: check copies whose ExecStart points at the
# binaries just built (the only change). It exits 0 on warnings such as an unknown directive,
# so any output is a failure.
mkdir -p "$tmp/units"
for unit in deploy/systemd/*.service; do
  sed "s#/opt/flagedge/bin/#$tmp/bin/#" "$unit" > "$tmp/units/$(basename "$unit")"
done
verify() { (cd "$(dirname "$1")" && systemd-analyze verify --man=no "./$(basename "$1")" 2>&1); }
for unit in "$tmp"/units/*.service; do
  out=$(verify "$unit") && [ -z "$out" ] || fail "systemd-analyze verify $(basename "$unit"):"$'\n'"$out"
  # The threshold is in tenths of the exposure score systemd prints: 20 is 2.0 ("OK").
  out=$(systemd-analyze security --offline=yes --threshold=20 "$unit" 2>&1) \
    || fail "$(basename "$unit") is exposed above 2.0:"$'\n'"$(tail -n 3 <<<"$out")"
done
mkdir -p "$tmp/broken" && sed 's/^ProtectSystem=/ProtectSytem=/' "$tmp/units/flagedge-edge.service" > "$tmp/broken/flagedge-edge.service"
out=$(verify "$tmp/broken/flagedge-edge.service") && [ -z "$out" ] && fail "systemd-analyze verify accepted a misspelt directive"
sed '/^ProtectSystem=/d; /^ProtectHome=/d; /^PrivateUsers=/d; /^SystemCallFilter=/d; /^RestrictAddressFamilies=/d' \
  "$tmp/units/flagedge-edge.service" > "$tmp/broken/flagedge-edge.service"
systemd-analyze security --offline=yes --threshold=20 "$tmp/broken/flagedge-edge.service" >/dev/null 2>&1 \
  && fail "systemd-analyze security accepted a unit without its hardening"
log "systemd: ok"

# --- tls -----------------------------------------------------------------------------------
bash deploy/gen-dev-certs.sh "$tmp/tls" 2>/dev/null
openssl verify -CAfile "$tmp/tls/ca.crt" "$tmp/tls/controlplane.crt" >/dev/null || fail "gen-dev-certs: certificate does not verify"
for name in controlplane-1 controlplane-2 flagedge-controlplane-sync flagedge-controlplane-sync.flagedge.svc; do
  openssl x509 -in "$tmp/tls/controlplane.crt" -noout -checkhost "$name" | grep -q 'does match' \
    || fail "gen-dev-certs: certificate does not name $name"
done
[ "$(openssl x509 -in "$tmp/tls/controlplane.crt" -noout -pubkey)" = "$(openssl pkey -in "$tmp/tls/controlplane.key" -pubout)" ] \
  || fail "gen-dev-certs: key does not match the certificate"
openssl x509 -in "$tmp/tls/controlplane.crt" -noout -checkhost evil.example.com | grep -q 'does NOT match' \
  || fail "gen-dev-certs: the name check matches anything"
log "tls: ok"

# --- the probe and the image ---------------------------------------------------------------
(cd deploy/probe && go mod tidy -diff && go vet ./... && go test -count=1 ./...) >"$tmp/probe.log" 2>&1 \
  || { cat "$tmp/probe.log" >&2; fail "deploy/probe"; }
if [ "${FLAGEDGE_SKIP_IMAGE:-}" = 1 ]; then
  log "image: skipped (FLAGEDGE_SKIP_IMAGE=1)"
else
  bash deploy/check-image.sh
fi
log "all deploy checks passed"

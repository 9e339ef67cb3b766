#!/usr/bin/env bash
# Writes a private CA and a control-plane certificate signed by it, for the gRPC link between
# edges and the control plane in the compose file and in trials of the Kubernetes manifests:
#
#   deploy/gen-dev-certs.sh [DIR]          # default deploy/tls
#
#   DIR/ca.crt                 give to edges (--control-plane-ca, FLAGEDGE_CONTROL_PLANE_CA)
#   DIR/controlplane.crt/.key  give to the control plane (--grpc-tls-cert/--grpc-tls-key)
#   DIR/ca.key                 keep it, or delete it once the certificates are issued
#
# The certificate names every address an edge may dial: the compose services, the Kubernetes
# Services (short and cluster-local names) and loopback. Extra names: FLAGEDGE_CERT_SANS,
# e.g. "DNS:cp.example.com,IP:203.0.113.7". Existing files are kept, so re-running is safe.
# This is for development and trials: in production use your PKI or cert-manager.
set -euo pipefail
dir=${1:-"$(dirname "$0")/tls"}
days=${FLAGEDGE_CERT_DAYS:-825}
mkdir -p "$dir"
cd "$dir"

if [ ! -s ca.key ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
    -keyout ca.key -out ca.crt -subj "/CN=flagedge development CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
fi

if [ ! -s controlplane.key ]; then
  sans="DNS:controlplane-1,DNS:controlplane-2,DNS:localhost,IP:127.0.0.1,IP:::1"
  for svc in flagedge-controlplane flagedge-controlplane-sync; do
    sans="$sans,DNS:$svc,DNS:$svc.flagedge.svc,DNS:$svc.flagedge.svc.cluster.local"
  done
  [ -n "${FLAGEDGE_CERT_SANS:-}" ] && sans="$sans,$FLAGEDGE_CERT_SANS"
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -keyout controlplane.key -out controlplane.csr -subj "/CN=flagedge-controlplane" 2>/dev/null
  openssl x509 -req -in controlplane.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
    -days "$days" -out controlplane.crt -extfile <(printf '%s\n' \
      "subjectAltName=$sans" \
      "basicConstraints=critical,CA:FALSE" \
      "keyUsage=critical,digitalSignature" \
      "extendedKeyUsage=serverAuth") 2>/dev/null
  rm -f controlplane.csr ca.srl
fi

# The containers run as uid 65532 and compose bind-mounts secrets with the host file's mode,
# so the key must be readable by others here. Acceptable for a development key on your own
# machine; never for a production key.
chmod 0644 controlplane.key
chmod 0600 ca.key
echo "gen-dev-certs: $(pwd)/{ca.crt,controlplane.crt,controlplane.key}" >&2

#!/usr/bin/env bash
# Installs what a fresh machine lacks to build, run and test flagedge: the PostgreSQL server
# binaries (tests and `make run` start throwaway clusters with them), Node.js with npm (the
# end-to-end tests run the official posthog-node SDK), Chromium (the console's browser
# tests drive it headless) and wrk (the load generator of `bench --scenario pinned`).
set -euo pipefail

need_pg() {
  local bindir
  bindir=$(pg_config --bindir 2>/dev/null || true)
  [ -n "$bindir" ] && [ -x "$bindir/initdb" ] && return 1
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && return 1
  return 0
}

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"

if need_pg; then
  echo "install-deps: installing postgresql-15" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql-15 >/dev/null
fi
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "install-deps: installing nodejs and npm" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nodejs npm >/dev/null
fi
if ! command -v chromium >/dev/null; then
  echo "install-deps: installing chromium" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
if ! command -v wrk >/dev/null; then
  echo "install-deps: installing wrk" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq wrk >/dev/null
fi
if [ "$(id -u)" -eq 0 ] && ! id postgres >/dev/null 2>&1; then
  useradd --system --home /var/lib/postgresql --shell /bin/bash postgres
fi
command -v go >/dev/null || { echo "install-deps: Go is required (https://go.dev/dl)" >&2; exit 1; }

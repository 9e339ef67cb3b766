#!/usr/bin/env bash
# Builds deploy/Dockerfile without a Docker daemon (buildah, as root) and checks the image:
# non-root user, no shell, static binaries built with -trimpath and the version stamped in.
#
# No container registry is reachable from CI, so the Dockerfile's builder image (golang:*) is
# replaced, through its GO_IMAGE argument, by one assembled here from the local Go toolchain
# plus busybox (for RUN's /bin/sh); modules come from the local module cache served as a
# file:// GOPROXY, and the local build cache is mounted so that compiled packages are reused.
# The final stage is FROM scratch and needs no pull. Everything else is the real Dockerfile.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "check-image: $*" >&2; }
fail() { log "FAIL: $*"; exit 1; }

if [ "$(id -u)" -ne 0 ]; then
  # Rootless buildah needs subordinate uid ranges set up for the user; CI runs as root.
  log "skipped: building without a daemon needs root here (rootless buildah needs /etc/subuid)"
  exit 0
fi
missing=()
command -v buildah >/dev/null || missing+=(buildah)
/bin/busybox --list 2>/dev/null | grep -qx sh || missing+=(busybox-static)
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  apt-get -o DPkg::Lock::Timeout=300 update -qq
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq "${missing[@]}" >/dev/null
fi
[ -s /etc/ssl/certs/ca-certificates.crt ] || fail "/etc/ssl/certs/ca-certificates.crt missing (apt-get install ca-certificates)"

work=$(mktemp -d /tmp/flagedge-image.XXXXXX)
# overlay is fast; inside a container (overlay on overlay) it may not mount, then vfs (slow,
# copies every layer) still works. FLAGEDGE_BUILDAH_DRIVER forces one.
driver=${FLAGEDGE_BUILDAH_DRIVER:-}
if [ -z "$driver" ]; then
  driver=vfs
  P=(buildah --root "$work/probe" --runroot "$work/probe-run" --storage-driver overlay)
  if c=$("${P[@]}" from scratch 2>/dev/null) && "${P[@]}" mount "$c" >/dev/null 2>&1; then driver=overlay; fi
  "${P[@]}" rm --all >/dev/null 2>&1 || true
  rm -rf "$work/probe" "$work/probe-run"
fi
B=(buildah --root "$work/storage" --runroot "$work/run" --storage-driver "$driver")
cleanup() {
  "${B[@]}" rm --all >/dev/null 2>&1 || true
  "${B[@]}" rmi --all --force >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# The builder image: what golang:*-bookworm provides to this Dockerfile (go, sh, mkdir, chmod,
# cp, the CA bundle), from this machine's files.
ctr=$("${B[@]}" from scratch)
mnt=$("${B[@]}" mount "$ctr")
mkdir -p "$mnt/usr/local" "$mnt/bin" "$mnt/tmp" "$mnt/root" "$mnt/etc/ssl/certs"
chmod 1777 "$mnt/tmp"
cp -a "$(go env GOROOT)" "$mnt/usr/local/go"
cp /bin/busybox "$mnt/bin/busybox"
for applet in sh mkdir chmod chown cp; do ln -s busybox "$mnt/bin/$applet"; done
cp /etc/ssl/certs/ca-certificates.crt "$mnt/etc/ssl/certs/"
"${B[@]}" umount "$ctr" >/dev/null
"${B[@]}" config --env PATH=/usr/local/go/bin:/bin --env HOME=/root --env GOPATH=/go \
  --env GOTOOLCHAIN=local "$ctr"
"${B[@]}" commit -q "$ctr" localhost/flagedge-go-builder:local >/dev/null

# Every module the build needs must be in the local cache that serves as the proxy.
go mod download
modcache=$(go env GOMODCACHE)
gocache=$(go env GOCACHE)
mkdir -p "$gocache"

version=check-$(date -u +%Y%m%d%H%M%S)
commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
log "building deploy/Dockerfile (version $version)"
"${B[@]}" build --isolation chroot --quiet --layers=false -f deploy/Dockerfile \
  --build-arg GO_IMAGE=localhost/flagedge-go-builder:local \
  --build-arg GOPROXY=file:///goproxy --build-arg GOSUMDB=off \
  --build-arg VERSION="$version" --build-arg COMMIT="$commit" \
  -v "$modcache/cache/download:/goproxy:ro" -v "$gocache:/root/.cache/go-build" \
  -t localhost/flagedge:check . >/dev/null

# The image's configuration.
user=$("${B[@]}" inspect --type image --format '{{.OCIv1.Config.User}}' localhost/flagedge:check)
[ "$user" = "65532:65532" ] || fail "image user is '$user', want 65532:65532"
env=$("${B[@]}" inspect --type image --format '{{range .OCIv1.Config.Env}}{{println .}}{{end}}' localhost/flagedge:check)
grep -qx 'PATH=/usr/local/bin' <<<"$env" || fail "image has no PATH=/usr/local/bin"

# Its files.
ctr=$("${B[@]}" from localhost/flagedge:check)
root=$("${B[@]}" mount "$ctr")
for f in bin/sh bin/busybox usr/bin/env; do
  [ ! -e "$root/$f" ] || fail "image contains /$f: the final stage must be scratch"
done
[ -s "$root/etc/ssl/certs/ca-certificates.crt" ] || fail "image has no CA bundle"
owner=$(stat -c '%u:%g %a' "$root/var/lib/flagedge/edge")
[ "$owner" = "65532:65532 700" ] || fail "/var/lib/flagedge/edge is '$owner', want 65532:65532 700"
[ "$(stat -c '%u' "$root/usr/local/bin")" = 0 ] || fail "/usr/local/bin must belong to root"
for bin in controlplane edge flagedge-probe; do
  f="$root/usr/local/bin/$bin"
  [ -x "$f" ] || fail "image has no /usr/local/bin/$bin"
  info=$(go version -m "$f") || fail "$bin: no Go build information"
  # Without cgo the Go linker links internally and statically: no libc needed in scratch.
  grep -q $'build\tCGO_ENABLED=0' <<<"$info" || fail "$bin was not built with CGO_ENABLED=0"
  grep -q $'build\t-trimpath=true' <<<"$info" || fail "$bin was not built with -trimpath"
done
# -X on a variable that does not exist is silently ignored by the linker, and -trimpath keeps
# ldflags out of the build information: the only real check is what --version prints.
for bin in controlplane edge; do
  out=$("$root/usr/local/bin/$bin" --version 2>&1) || fail "$bin --version failed: $out"
  [ "$out" = "flagedge $version $commit" ] || fail "$bin --version printed '$out', want 'flagedge $version $commit'"
done
"$root/usr/local/bin/flagedge-probe" -timeout 1s http://127.0.0.1:1/_health 2>/dev/null \
  && fail "flagedge-probe succeeded against a closed port"
size=$("${B[@]}" images --format '{{.Size}}' localhost/flagedge:check)
log "ok: localhost/flagedge:check ($size), user 65532, static binaries, no shell"

#!/usr/bin/env bash
# Builds the base images from Debian packages, for machines where the public image hub is
# unreachable (no python:3.11-slim, no prom/prometheus): Debian 12 (bookworm) by debootstrap,
# imported with `docker import`. Debian 12's python3 is 3.11, python:3.11-slim's major.minor.
#   sudo bash deploy/build_base.sh            # -> ftis-swarm-base:bookworm
#   TESTNET_BASE_IMAGE=ftis-swarm-base:bookworm docker-compose -f deploy/docker-compose.yml \
#       -f deploy/docker-compose.debian.yml up --build -d
# Needs root, debootstrap (apt-get install debootstrap) and a Debian mirror: DEBIAN_MIRROR,
# else the first `URIs:`/`deb` line for Debian in /etc/apt/sources.list*, else deb.debian.org.
# The image's own apt sources name the same mirror. An existing image is kept (FORCE=1 rebuilds).
set -euo pipefail
tag="${1:-ftis-swarm-base:bookworm}"
suite=bookworm
say() { printf '[build_base] %s\n' "$*"; }
if [ -z "${FORCE:-}" ] && docker image inspect "$tag" >/dev/null 2>&1; then
  say "$tag exists (FORCE=1 rebuilds it)"; exit 0
fi
command -v debootstrap >/dev/null || { say "debootstrap is missing: apt-get install debootstrap"; exit 2; }
[ "$(id -u)" = 0 ] || { say "debootstrap needs root"; exit 2; }
mirror="${DEBIAN_MIRROR:-}"
if [ -z "$mirror" ]; then
  mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null \
    | grep -oE '(URIs:|deb) +https?://[^ ]*/debian/?( |$)' | head -1 | awk '{print $2}' || true)
fi
mirror="${mirror:-http://deb.debian.org/debian}"
mirror="${mirror%/}"
security="${DEBIAN_SECURITY_MIRROR:-${mirror}-security}"
root=$(mktemp -d /tmp/ftis-base.XXXXXX)
trap 'rm -rf "$root"' EXIT
say "debootstrap $suite from $mirror into $root"
debootstrap --variant=minbase --include=python3,python3-venv,python-is-python3,ca-certificates \
  "$suite" "$root" "$mirror" >/tmp/ftis-build-base.log 2>&1 \
  || { tail -20 /tmp/ftis-build-base.log; exit 1; }
cat >"$root/etc/apt/sources.list" <<SRC
deb $mirror $suite main
deb $mirror $suite-updates main
deb $security $suite-security main
SRC
# Keep the image small: no package lists, no downloaded .debs, no docs (as the slim images do).
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/archives/*.deb "$root"/usr/share/doc/* \
  "$root"/usr/share/man/* "$root"/usr/share/locale/*
say "importing as $tag"
tar -C "$root" -c . | docker import --change 'ENV LANG=C.UTF-8' --change 'CMD ["bash"]' - "$tag" >/dev/null
docker run --rm "$tag" python --version
say "done: $(docker image inspect -f '{{.Size}}' "$tag" | awk '{printf "%.0f MB", $1/1e6}')"

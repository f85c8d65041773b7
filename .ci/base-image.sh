#!/usr/bin/env bash
# Builds swetui's sandbox base image without any registry: a minimal Debian
# rootfs made with debootstrap (python3, pytest, git, patch, a user swetui with
# uid 1000), loaded with `docker import`. Skips the work when the image
# already exists; a lock keeps two builds on one machine from racing.
set -euo pipefail
. "$(dirname "$0")/progress.sh"
tag=${1:-swetui/base:bookworm}
docker info >/dev/null 2>&1 || { echo "base-image: the Docker Engine does not answer (docker info); start it first" >&2; exit 1; }
exec 9>/tmp/swetui-base-image.lock
flock 9
if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "base image $tag present"
  exit 0
fi
command -v debootstrap >/dev/null || { apt-get update -qq; apt-get install -y -qq debootstrap >/dev/null; }
mirror=$(sed -n 's/^URIs: *\(http[^ ]*debian\)$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1)
mirror=${mirror:-http://deb.debian.org/debian}
root=$(mktemp -d)
log=$(mktemp)
trap 'rm -rf "$root" "$log"' EXIT
echo "debootstrap bookworm from $mirror into $root (about 1.5 minutes)"
progress debootstrap "$log" debootstrap --variant=minbase --include=python3,python3-pytest,git,patch bookworm "$root" "$mirror" >"$log" 2>&1 \
  || { tail -30 "$log"; exit 1; }
chroot "$root" bash -c 'apt-get clean; rm -rf /var/lib/apt/lists/* /usr/share/doc /usr/share/man /usr/share/locale'
chroot "$root" useradd -m -u 1000 -s /bin/bash swetui
echo "docker import $tag"
tar -C "$root" -c . | docker import \
  -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1' \
  -c 'CMD ["/bin/bash"]' - "$tag"
docker image ls "$tag"

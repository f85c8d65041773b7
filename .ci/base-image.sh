#!/usr/bin/env bash
# Builds swetui's sandbox base image without any registry: a minimal Debian
# rootfs made with debootstrap (python3, pytest, git, patch), loaded with
# `docker import`. Skips the work when the image already exists.
set -euo pipefail
tag=${1:-swetui/base:bookworm}
if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "base image $tag present"
  exit 0
fi
command -v debootstrap >/dev/null || { apt-get update -qq; apt-get install -y -qq debootstrap >/dev/null; }
mirror=$(sed -n 's/^URIs: *\(http[^ ]*debian\)$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1)
mirror=${mirror:-http://deb.debian.org/debian}
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
echo "debootstrap bookworm from $mirror into $root"
debootstrap --variant=minbase --include=python3,python3-pytest,git,patch bookworm "$root" "$mirror" >/tmp/debootstrap.log 2>&1 \
  || { tail -30 /tmp/debootstrap.log; exit 1; }
chroot "$root" bash -c 'apt-get clean; rm -rf /var/lib/apt/lists/* /usr/share/doc /usr/share/man /usr/share/locale'
chroot "$root" useradd -m -u 1000 -s /bin/bash swetui
tar -C "$root" -c . | docker import \
  -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1' \
  -c 'CMD ["/bin/bash"]' - "$tag"
docker image ls "$tag"

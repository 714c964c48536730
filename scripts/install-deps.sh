#!/usr/bin/env bash
# install-deps.sh - install every Debian package monoceph builds, runs and tests with.
# Idempotent: packages already installed are left alone and apt is not touched at all.
set -euo pipefail

PACKAGES=(
  # Ceph daemons for the throwaway local cluster (scripts/ceph-local.sh)
  ceph-mon ceph-osd ceph-mgr ceph-mds
  # Ceph clients the node plugin drives
  ceph-common ceph-fuse rbd-fuse
  # RBD mirroring between two local clusters (scripts/ceph-mirror.sh, make test-mirror)
  rbd-mirror
  # C libraries go-ceph links against (cgo)
  librados-dev librbd-dev libcephfs-dev
  # build toolchain for cgo
  gcc libc6-dev make git
  # node plugin: filesystems, loop devices, mount helpers
  e2fsprogs xfsprogs util-linux mount fuse3
  # make bench: the RBD data path measured with fio, its rbd engine (librbd) as the floor
  fio
  # scripts: ss, process checks, certificates, HTTP checks; JSON for the ceph-csi migration
  iproute2 procps python3 ca-certificates openssl curl jq
  # container image (make image, make e2e): debootstrap makes the Debian base root filesystem,
  # buildah builds the Dockerfile, podman runs the e2e's driver containers, skopeo checks the
  # OCI archive of make image-save; runc as podman's runtime (crun fails on hybrid cgroup hosts)
  debootstrap buildah podman skopeo runc
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#PACKAGES[@]} packages present" >&2
  exit 0
fi
echo "install-deps: installing ${missing[*]}" >&2
SUDO=
((EUID == 0)) || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done" >&2

#!/usr/bin/env bash
# ceph-root.sh - run commands with another Ceph release than the host's: chrooted in a Debian
# root filesystem (scripts/rootfs.sh) that holds that release's daemons, CLIs, FUSE clients and
# C libraries, with the host's Go toolchain, caches and source tree.
#
# Usage:
#   scripts/ceph-root.sh suite RELEASE        print the Debian suite RELEASE comes from
#   scripts/ceph-root.sh dir RELEASE          make (or reuse) the release's root filesystem, print it
#   scripts/ceph-root.sh run RELEASE CMD...   run CMD in it (for pacific: on the host, as it is)
#
# Releases: pacific (16.2, the host: Debian 12), reef (18.2, Debian 13 trixie), tentacle (20.2,
# Debian forky). The root filesystem is cached by rootfs.sh and rebuilt when a package version
# changes; the first build takes one to two minutes (run it under the heavy-work lock).
#
# How CMD runs: in a private mount namespace, chrooted to an overlay whose lower layer is the
# cached root filesystem (never written) and whose upper layer is a tmpfs (writes inside the
# root filesystem vanish with the namespace). Bound into it at their host paths: /proc (a new
# mount), /sys and /dev (recursively: loop devices, /dev/fuse), /tmp (cluster directories,
# sockets, test files), /etc/hosts, the Go toolchain (read-only), GOCACHE, GOMODCACHE and the
# source tree this script is in. The network is the host's. The working directory is kept when
# it lies in one of these. Mounts made inside (ceph-fuse, rbd-fuse, test mounts) stay in that
# namespace, which lives as long as a process in it does (a daemon started inside keeps it):
# inspect them with `nsenter -t <pid> -m findmnt`.
#
# Environment inside: the caller's, plus MONOCEPH_ROOT=RELEASE (scripts and the Makefile know
# they are inside), PATH with the host's Go first, GOPROXY=off and GOFLAGS=-mod=readonly (every
# module comes from the host's module cache: `go mod download` on the host first),
# GOTOOLCHAIN=local, and CGO_CFLAGS naming the root filesystem, so that Go's build cache never
# reuses C objects compiled against another version of the release's headers.
set -euo pipefail

usage() {
  sed -n '6,9p' "$0" >&2
  exit 2
}
die() {
  echo "ceph-root: $*" >&2
  exit 1
}

# The packages of a release's root filesystem: daemons of the local cluster, the clients the
# node plugin and the tests run, the headers and compiler go-ceph builds with, and the tools
# the node plugin, the tests and scripts/ceph-local.sh call.
PACKAGES=(
  ceph-mon ceph-mgr ceph-osd ceph-mds ceph-common ceph-fuse rbd-fuse
  librados-dev librbd-dev libcephfs-dev gcc libc6-dev make
  fuse3 e2fsprogs xfsprogs mount util-linux iproute2 procps kmod
)

suite_of() {
  case $1 in
  pacific) echo bookworm ;;
  reef) echo trixie ;;
  tentacle) echo forky ;;
  *) die "unknown Ceph release '$1' (pacific, reef or tentacle)" ;;
  esac
}

(($# >= 2)) || usage
cmd=$1 release=$2
shift 2
suite=$(suite_of "$release")
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

rootfs() {
  [[ $release != pacific ]] || die "pacific is the host's own release: no root filesystem"
  "$here/scripts/rootfs.sh" dir "$suite" "${PACKAGES[@]}"
}

case $cmd in
suite) echo "$suite" ;;
dir) rootfs ;;
run)
  (($# >= 1)) || usage
  if [[ $release == pacific ]]; then
    [[ $(. /etc/os-release && echo "$VERSION_CODENAME") == bookworm ]] || die "pacific runs on the host, which is not Debian 12"
    exec "$@"
  fi
  [[ -z ${MONOCEPH_ROOT:-} ]] || die "already inside the $MONOCEPH_ROOT root filesystem"
  root=$(rootfs)
  go=$(command -v go || echo /usr/local/go/bin/go)
  [[ -x $go ]] || die "no Go toolchain on the host"
  goroot=$("$go" env GOROOT)
  gocache=$("$go" env GOCACHE)
  gomodcache=$("$go" env GOMODCACHE)
  mkdir -p "$gocache" "$gomodcache"
  # the root filesystem's cache directory name ends in a hash of its package versions
  tag=$(basename "$(dirname "$root")" | tr -c 'A-Za-z0-9\n' _)
  export MONOCEPH_ROOT=$release GOPROXY=off GOFLAGS=${GOFLAGS:--mod=readonly} GOTOOLCHAIN=local \
    GOCACHE=$gocache GOMODCACHE=$gomodcache HOME=/root \
    CGO_CFLAGS="${CGO_CFLAGS:--O2 -g} -DMONOCEPH_ROOTFS_$tag" \
    PATH=$goroot/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
  # the mounts below live in this namespace only; the overlay's mount point /mnt is hidden
  # from nothing outside it
  exec unshare --mount --propagation private -- bash -euo pipefail -c '
    root=$1 goroot=$2 here=$3 cwd=$4
    shift 4
    m=/mnt/monoceph-root
    mount -t tmpfs -o mode=755 monoceph-root /mnt
    mkdir -p /mnt/upper /mnt/work $m
    mount -t overlay overlay -o "lowerdir=$root,upperdir=/mnt/upper,workdir=/mnt/work" $m
    mount -t proc proc $m/proc
    mount --rbind /sys $m/sys
    mount --rbind /dev $m/dev
    mount -t tmpfs -o mode=755 tmpfs $m/run
    bind() { # bind <host path> [ro]
      if [[ -d $1 ]]; then mkdir -p "$m$1"; else mkdir -p "$(dirname "$m$1")" && touch "$m$1"; fi
      mount --bind "$1" "$m$1"
      [[ ${2:-} != ro ]] || mount -o remount,bind,ro "$m$1"
    }
    bind /tmp
    bind /etc/hosts ro
    bind "$goroot" ro
    bind "$GOCACHE"
    bind "$GOMODCACHE"
    bind "$here"
    case $cwd/ in "$here"/* | /tmp/*) ;; *) cwd=$here ;; esac
    exec chroot $m /bin/bash -c "cd \"\$0\" && exec \"\$@\"" "$cwd" "$@"
  ' ceph-root "$root" "$goroot" "$here" "$PWD" "$@"
  ;;
*) usage ;;
esac

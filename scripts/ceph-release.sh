#!/bin/sh
# ceph-release.sh - print the go-ceph build tag for the Ceph C libraries installed here (the
# version of librados-dev), for `make build CEPH_RELEASE=...` in the image's build stage and in
# root filesystems of other Debian releases (scripts/rootfs.sh). The tag names the oldest Ceph C
# API the binary may call: building against a release's own libraries takes that release's tag.
# Tentacle (20.x) prints "tentacle": go-ceph has no constraint of that name, so the tag selects
# every API go-ceph knows (go-ceph's own CI builds Tentacle the same way). A release go-ceph does
# not know fails.
set -eu
v=$(dpkg-query -W -f '${Version}' librados-dev 2>/dev/null) || {
  echo "ceph-release: librados-dev is not installed" >&2
  exit 1
}
major=${v#*:}
major=${major%%.*}
case $major in
16) echo pacific ;;
17) echo quincy ;;
18) echo reef ;;
19) echo squid ;;
20) echo tentacle ;;
*)
  echo "ceph-release: Ceph $v is not a release go-ceph v0.40.0 has a build tag for (16-20): add it here" >&2
  exit 1
  ;;
esac

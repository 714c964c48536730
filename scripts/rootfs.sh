#!/usr/bin/env bash
# rootfs.sh - a cached Debian root filesystem made with debootstrap: the base of the container
# image (scripts/image.sh imports its tarball) and a chroot in which another Debian release's
# Ceph daemons run and the driver builds against that release's libraries.
#
# Usage:
#   scripts/rootfs.sh dir SUITE [PACKAGE...]       make (or reuse) the root filesystem, print its directory
#   scripts/rootfs.sh tar SUITE [PACKAGE...]       the same, then print the path of a tarball of it
#                                                  (numeric owners; `podman import` takes it as it is)
#   scripts/rootfs.sh versions SUITE [PACKAGE...]  print "package version" for everything it would
#                                                  hold (the cache key is made of this list)
#
# What it holds: debootstrap's minbase of SUITE (Priority: required, and apt), upgraded from
# SUITE-updates and SUITE-security (none for sid/unstable), plus PACKAGEs installed with apt
# without recommends. Documentation, man pages and translations are left out, the way Debian's
# "-slim" container images do (a dpkg path-exclude file stays in it for later installs), and
# /usr/sbin/policy-rc.d keeps packages from starting services.
#
# Cache: $ROOTFS_CACHE/SUITE-<hash of suite, mirror, package list>-<hash of versions and of this
# script>/, holding rootfs/ and, once asked for, rootfs.tar. The versions are the candidates apt resolves for the
# whole set from the mirror's current indexes (checked on every call, a few seconds), so a new
# package version in any of the suites (a security fix, a Ceph point release) makes a new root
# filesystem, and the superseded one of the same suite and package list is removed. A build
# happens in a temporary directory renamed into place when complete: a killed build is never
# reused. Callers share the directory: treat it as read-only (bind-mount or overlay writable
# parts). Mounts made while building live in a private mount namespace and go with it.
#
# Environment:
#   ROOTFS_CACHE            cache directory (default /var/cache/monoceph/rootfs)
#   ROOTFS_MIRROR           Debian mirror (default: the host's deb.debian.org-style entry for
#                           /debian in /etc/apt, else http://deb.debian.org/debian)
#   ROOTFS_SECURITY_MIRROR  security mirror (default: ROOTFS_MIRROR with -security appended)
#   ROOTFS_KEYRING          keyring the suites' Release files are checked with
#                           (default /usr/share/keyrings/debian-archive-keyring.gpg)
#   ROOTFS_TIMEOUT          bound in seconds on debootstrap and on each apt run (default 900)
# Needs root, debootstrap and apt. Progress goes to stderr; stdout carries only the result.
set -euo pipefail

usage() {
  sed -n '6,11p' "$0" >&2
  exit 2
}
log() { echo "rootfs: $*" >&2; }
die() {
  log "$*"
  exit 1
}

(($# >= 2)) || usage
cmd=$1 suite=$2
shift 2
case $cmd in dir | tar | versions) ;; *) usage ;; esac
[[ $suite =~ ^[a-z][a-z0-9-]*$ ]] || die "bad suite name '$suite'"
mapfile -t packages < <(printf '%s\n' "$@" | sed '/^$/d' | sort -u)
for p in "${packages[@]}"; do
  [[ $p =~ ^[a-z0-9][a-z0-9+.-]+$ ]] || die "bad package name '$p'"
done

cache=${ROOTFS_CACHE:-/var/cache/monoceph/rootfs}
keyring=${ROOTFS_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}
limit=${ROOTFS_TIMEOUT:-900}
host_mirror() {
  local m
  m=$(grep -rhoE 'https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null | head -1 | tr -d ' ') || true
  echo "${m%/}"
}
mirror=${ROOTFS_MIRROR:-$(host_mirror)}
mirror=${mirror:-http://deb.debian.org/debian}
security=${ROOTFS_SECURITY_MIRROR:-$mirror-security}
for tool in debootstrap apt-get apt-cache sha256sum timeout unshare; do
  command -v $tool >/dev/null || die "$tool is missing (scripts/install-deps.sh installs it)"
done
((EUID == 0)) || die "needs root (debootstrap, chroot)"

# the apt sources of the root filesystem; the host resolves versions from the same lines
sources() {
  echo "deb $mirror $suite main"
  case $suite in sid | unstable | experimental) return ;; esac
  echo "deb $mirror $suite-updates main"
  echo "deb $security $suite-security main"
}

# apt bounded and retried on network errors; no recommends, no questions. Release files are
# checked against the keyring but not for expiry: these machines' mirror serves forky and sid
# Release files past their Valid-Until (a frozen archive).
APT_OPTS=(-o Acquire::Retries=3 -o Acquire::http::Timeout=30 -o Acquire::Check-Valid-Until=false
  -o APT::Install-Recommends=false -o Dpkg::Use-Pty=0)

# resolve prints "package version" for the minbase set plus the packages, as apt would install
# them from the mirror's current indexes, using an apt state of its own under the cache.
resolve() {
  local d=$cache/apt/$suite
  mkdir -p "$d/lists/partial" "$d/archives/partial" "$d/parts"
  exec 8>"$d.lock" # this runs in a subshell: the lock goes with it
  flock 8
  sources | sed "s|^deb |deb [signed-by=$keyring] |" >"$d/sources.list"
  : >"$d/status"
  # APT_CONFIG is read before /etc/apt/apt.conf.d: the host's own settings stay out
  cat >"$d/apt.conf" <<EOF
Dir::Etc::Parts "$d/parts";
Dir::Etc::SourceList "$d/sources.list";
Dir::Etc::SourceParts "$d/parts";
Dir::Etc::Preferences "/dev/null";
Dir::Etc::PreferencesParts "$d/parts";
Dir::State::Lists "$d/lists";
Dir::State::Status "$d/status";
Dir::Cache "$d";
Dir::Cache::archives "$d/archives";
APT::Architecture "$(dpkg --print-architecture)";
Acquire::Languages "none";
EOF
  export APT_CONFIG=$d/apt.conf
  timeout "$limit" apt-get "${APT_OPTS[@]}" -qq update >&2 || die "apt-get update for $suite from $mirror failed (is '$suite' a suite there?)"
  local required
  required=$(apt-cache dumpavail | awk '/^Package:/ {p = $2} /^Priority: required/ {print p}' | sort -u)
  [[ -n $required ]] || die "the $suite index lists no required packages"
  # shellcheck disable=SC2086 # word splitting of the package names is intended
  timeout "$limit" apt-get "${APT_OPTS[@]}" -s install $required apt "${packages[@]}" 2>&1 |
    awk '/^Inst / {gsub(/[()]/, "", $3); print $2, $3} /^E: / {print > "/dev/stderr"; bad = 1} END {exit bad}' |
    sort || die "apt cannot install ${packages[*]} on $suite"
  unset APT_CONFIG
}

versions=$(resolve)
[[ $cmd == versions ]] && { echo "$versions"; exit 0; }

id=$(printf '%s\n' "$suite" "$mirror" "${packages[@]}" | sha256sum | cut -c1-10)
# this script is part of the key: a changed recipe makes a new root filesystem
key=$( (echo "$versions" && cat "$0") | sha256sum | cut -c1-10)
name=$suite-$id-$key
dir=$cache/$name

# chroot_run runs a command in the root filesystem at $1 with /proc mounted, in a private
# mount namespace: nothing stays mounted if it is killed.
chroot_run() {
  local root=$1
  shift
  timeout "$limit" unshare --mount --propagation private -- bash -c 'mount -t proc proc "$0/proc" && exec chroot "$0" "$@"' \
    "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
}

# slim leaves out what Debian's "-slim" container images leave out, now and for later installs:
# documentation, downloaded packages, translations of the indexes
slim() {
  local root=$1
  cat >"$root/etc/apt/apt.conf.d/monoceph-slim" <<'EOF'
// rootfs.sh: apt keeps no downloaded packages or caches, and fetches no translations
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
Acquire::Languages "none";
EOF
  mkdir -p "$root/etc/dpkg/dpkg.cfg.d"
  cat >"$root/etc/dpkg/dpkg.cfg.d/monoceph-slim" <<'EOF'
# rootfs.sh: no documentation, man pages or translations (as Debian's -slim images)
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
EOF
  find "$root/usr/share/doc" -mindepth 1 -not -type d -not -name copyright -delete
  find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "$root"/usr/share/{man,groff,info,lintian,linda,locale}/*
}

build() {
  local tmp=$1 root=$1/rootfs attempt script=()
  # suites newer than this debootstrap (forky on Debian 12's) bootstrap the way sid does
  [[ -e /usr/share/debootstrap/scripts/$suite ]] || script=(/usr/share/debootstrap/scripts/sid)
  for attempt in 1 2; do
    rm -rf "$root"
    log "debootstrap $suite from $mirror (attempt $attempt)"
    if timeout "$limit" unshare --mount --propagation private -- \
      debootstrap --variant=minbase --keyring="$keyring" "$suite" "$root" "$mirror" "${script[@]}" >"$tmp/debootstrap.log" 2>&1; then
      break
    fi
    tail -5 "$tmp/debootstrap.log" >&2
    ((attempt < 2)) || die "debootstrap $suite failed twice"
  done
  sources >"$root/etc/apt/sources.list"
  printf '#!/bin/sh\n# rootfs.sh: packages never start services here\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
  chmod 755 "$root/usr/sbin/policy-rc.d"
  slim "$root"
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  log "apt: upgrade from $suite-updates/-security, install ${packages[*]:-nothing more}"
  {
    chroot_run "$root" apt-get "${APT_OPTS[@]}" -q update &&
      chroot_run "$root" apt-get "${APT_OPTS[@]}" -q -y dist-upgrade &&
      if ((${#packages[@]})); then chroot_run "$root" apt-get "${APT_OPTS[@]}" -q -y install "${packages[@]}"; fi
  } >"$tmp/apt.log" 2>&1 || {
    tail -20 "$tmp/apt.log" >&2
    die "apt in the $suite root filesystem failed"
  }
  chroot_run "$root" apt-get clean
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/log/apt/* "$root"/var/cache/debconf/*-old
  : >"$root/etc/resolv.conf"
  # what is installed, against what the key was made of (an index updated in between)
  chroot_run "$root" dpkg-query -W -f '${Package} ${Version}\n' | sort >"$tmp/installed"
  echo "$versions" >"$tmp/versions"
  if ! join "$tmp/versions" "$tmp/installed" | awk '$2 != $3 {bad = 1} END {exit bad}'; then
    log "warning: installed versions differ from the ones resolved moments ago (the mirror changed); the next call rebuilds"
  fi
}

mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9 # one build at a time per cache; a second caller then finds the result
if [[ ! -d $dir/rootfs ]]; then
  tmp=$(mktemp -d "$cache/.build-$name.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  start=$SECONDS
  build "$tmp"
  chmod 755 "$tmp"
  mv -T "$tmp" "$dir"
  trap - EXIT
  log "built $dir in $((SECONDS - start)) s ($(du -sm "$dir/rootfs" | cut -f1) MB)"
  # superseded versions of the same suite and package list, and debris of killed builds
  # (not while a process runs chrooted in one, or in an overlay over one: scripts/ceph-root.sh)
  for old in "$cache/$suite-$id"-* "$cache"/.build-*; do
    [[ -e $old && $old != "$dir" ]] || continue
    if find /proc/[0-9]*/root -maxdepth 0 -lname "$old/*" 2>/dev/null | grep -q . ||
      grep -qsF "lowerdir=$old/rootfs" /proc/[0-9]*/mountinfo; then
      log "keeping $old: a process runs in it"
    else
      rm -rf "$old"
    fi
  done
fi

if [[ $cmd == tar ]]; then
  if [[ ! -f $dir/rootfs.tar ]]; then
    tar -C "$dir/rootfs" --numeric-owner -cf "$dir/rootfs.tar.tmp" .
    mv "$dir/rootfs.tar.tmp" "$dir/rootfs.tar"
  fi
  echo "$dir/rootfs.tar"
else
  echo "$dir/rootfs"
fi

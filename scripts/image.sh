#!/usr/bin/env bash
# image.sh - the monoceph container image, built with buildah where no registry is reachable.
#
# Usage (the Makefile's image targets call these):
#   scripts/image.sh conf        write the containers.conf drop-in buildah and podman need on
#                                these machines (runc, ulimits within this host's hard limits)
#   scripts/image.sh base        make the images the Dockerfile's FROM lines name, unless they
#                                are here and current: Debian from scripts/rootfs.sh, Go from
#                                the host's toolchain
#   scripts/image.sh build       base, then build the Dockerfile into $IMAGE and check that the
#                                binary runs and finds its libraries
#   scripts/image.sh save FILE   write $IMAGE to FILE as an OCI archive
#
# Environment:
#   IMAGE             image to build (default quay.io/monoceph/monoceph:<chart appVersion>, the
#                     chart's default)
#   IMAGE_SUITE       Debian suite of the base images (default trixie)
#   VERSION           version the binary reports (default devel)
#   IMAGE_BUILD_ARGS  more arguments for `buildah bud` (e.g. --build-arg ...)
#   CONTAINERS_DROPIN where conf writes (default /etc/containers/containers.conf.d/monoceph.conf,
#                     which every podman and buildah on the host reads)
#
# The base images are imported under the names Docker Hub gives them, so the Dockerfile stays
# the one `docker build` uses: docker.io/library/debian:<suite>-slim (debootstrap minbase,
# slimmed like Debian's -slim images) and docker.io/library/golang:<host Go version>-<suite>
# (only /usr/local/go, all the Dockerfile takes from it). The Debian image carries a label
# naming its root filesystem and the candidate versions of every package the Dockerfile
# installs: when Debian publishes a new version of any of them the image is imported anew, and
# buildah's cached layers (kept between builds, --layers) are rebuilt on it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { echo "image: $*" >&2; }
die() {
  log "$*"
  exit 1
}

suite=${IMAGE_SUITE:-trixie}
app_version=$(awk '/^appVersion:/ {gsub(/"/, "", $2); print $2}' charts/monoceph/Chart.yaml)
image=${IMAGE:-quay.io/monoceph/monoceph:$app_version}
dropin=${CONTAINERS_DROPIN:-/etc/containers/containers.conf.d/monoceph.conf}
go_version=$(go env GOVERSION 2>/dev/null) || die "go is not on the PATH"
go_version=${go_version#go}
debian_image=docker.io/library/debian:$suite-slim
go_image=docker.io/library/golang:$go_version-$suite
label=io.monoceph.base

# conf: crun fails on this host's hybrid cgroups, and podman's default ulimits for root exceed
# the hard limits of a process without CAP_SYS_RESOURCE (the container would not start). The
# highest nproc runc could set here was 32768 (32769 failed), under a shell hard limit of 96365.
conf() {
  local nofile nproc
  nofile=$(ulimit -Hn) nproc=$(ulimit -Hu)
  [[ $nofile == unlimited ]] && nofile=1048576
  [[ $nproc == unlimited || $nproc -gt 32768 ]] && nproc=32768
  mkdir -p "$(dirname "$dropin")"
  {
    echo "# monoceph (scripts/image.sh conf): what podman and buildah need on this host"
    echo "[containers]"
    echo "default_ulimits = [\"nofile=$nofile:$nofile\", \"nproc=$nproc:$nproc\"]"
    echo "[engine]"
    echo 'runtime = "runc"'
    echo 'cgroup_manager = "cgroupfs"'
    echo 'events_logger = "file"'
  } >"$dropin.tmp"
  mv "$dropin.tmp" "$dropin"
}

# dockerfile_packages lists the packages the Dockerfile's apt-get install commands name.
dockerfile_packages() {
  awk '/^[[:space:]]*#/ {next}
    { n = split($0, w, /[[:space:]]+/)
      for (i = 1; i <= n; i++) {
        if (w[i] == "install" && w[i-1] == "apt-get") { on = 1; continue }
        if (!on || w[i] == "" || w[i] == "\\" || w[i] ~ /^-/) continue
        if (w[i] == "&&") { on = 0; continue }
        print w[i]
      }
      if ($0 !~ /\\$/) on = 0 }' Dockerfile | sort -u
}

base() {
  local tar packages want have
  tar=$(scripts/rootfs.sh tar "$suite")
  mapfile -t packages < <(dockerfile_packages)
  ((${#packages[@]})) || die "found no apt-get install packages in the Dockerfile"
  want=$(basename "$(dirname "$tar")")/$(scripts/rootfs.sh versions "$suite" "${packages[@]}" | sha256sum | cut -c1-10)
  have=$(podman image inspect --format "{{index .Labels \"$label\"}}" "$debian_image" 2>/dev/null || true)
  if [[ $have != "$want" ]]; then
    log "importing $debian_image ($want)"
    podman import --quiet --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'CMD ["bash"]' --change "LABEL $label=$want" "$tar" "$debian_image" >/dev/null
  fi
  if ! podman image exists "$go_image"; then
    log "importing $go_image from $(go env GOROOT)"
    tar -C "$(go env GOROOT)" --numeric-owner --transform 's,^\.,usr/local/go,' -c . |
      podman import --quiet --change 'ENV PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        - "$go_image" >/dev/null
  fi
}

# missing_base explains a build that failed because a FROM image (named in buildah's output
# $1) is not here.
missing_base() {
  local name
  name=$(grep -oE '[^ ]+: image not known' "$1" | head -1 | sed 's/: image not known$//')
  log "base image ${name:-of the Dockerfile} is not in local storage, and nothing is pulled here:"
  case $name in
  docker.io/library/debian:*-slim)
    name=${name#docker.io/library/debian:}
    log "  make it from the Debian archive with: make image-base IMAGE_SUITE=${name%-slim}"
    ;;
  docker.io/library/golang:*)
    log "  Go images are the host's toolchain (go$go_version): make image-base IMAGE_SUITE=<suite>"
    log "  imports docker.io/library/golang:$go_version-<suite>; other Go versions cannot be made here"
    ;;
  *)
    log "  DEBIAN_IMAGE must be docker.io/library/debian:<suite>-slim (make image-base IMAGE_SUITE=<suite>)"
    log "  and GO_IMAGE docker.io/library/golang:$go_version-<suite>"
    ;;
  esac
}

build() {
  local modcache gocache host status out
  base
  modcache=$(go env GOMODCACHE)/cache/download gocache=$(go env GOCACHE)
  mkdir -p "$modcache" "$gocache"
  out=$(mktemp) host=$(mktemp -d)
  trap 'rm -rf "$out" "$host"' RETURN
  # What the RUN steps get from the host lives under /mnt, a directory every Debian image has:
  # buildah 1.28 leaves the mount points of -v volumes in the image, and these are created in
  # $host instead. apt is bounded and retried and, like scripts/rootfs.sh, accepts Release
  # files past their Valid-Until (the mirror here is a frozen archive). Go modules come from
  # the host's module cache first (offline when it has them), then from GOPROXY with the host's
  # CA bundle (this network may intercept TLS). The host's Go build cache is shared: packages
  # without cgo compile once for both (the cgo ones differ by C compiler, part of their key).
  printf '%s\n' 'Acquire::Retries "3";' 'Acquire::http::Timeout "30";' 'Acquire::Check-Valid-Until "false";' >"$host/apt.conf"
  log "building $image ($suite, go$go_version)"
  # shellcheck disable=SC2086 # IMAGE_BUILD_ARGS is a list of arguments
  buildah bud --layers --pull-never --isolation chroot --network host \
    --build-arg DEBIAN_IMAGE="$debian_image" --build-arg GO_IMAGE="$go_image" \
    --build-arg VERSION="${VERSION:-devel}" -v "$host:/mnt" \
    --build-arg APT_CONFIG=/mnt/apt.conf \
    --build-arg GOPROXY="file:///mnt/goproxy,$(go env GOPROXY)" -v "$modcache:/mnt/goproxy:ro" \
    --build-arg SSL_CERT_FILE=/mnt/ca.crt -v "${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}:/mnt/ca.crt:ro" \
    --build-arg GOCACHE=/mnt/gocache -v "$gocache:/mnt/gocache" \
    ${IMAGE_BUILD_ARGS:-} -t "$image" . 2>&1 | tee "$out" >&2 && status=0 || status=$?
  if ((status != 0)); then
    grep -qiE 'image not known|pull policy is .?never|does not exist in local storage' "$out" && missing_base "$out"
    die "buildah bud failed (exit $status)"
  fi
  # the binary starts, every library it links resolves (to the suite's Ceph packages), and
  # nothing of the build's mounts is left in the image
  podman run --rm --network host --entrypoint sh "$image" -c \
    'set -e; /usr/local/bin/monoceph --version; ! ldd /usr/local/bin/monoceph | grep "not found"
     dpkg-query -W -f "\${Package} \${Version}\n" librados2 librbd1 libcephfs2; test -z "$(ls -A /mnt)"' >&2 ||
    die "$image: monoceph does not start, lacks a library, or the image holds build mounts"
}

save() {
  local file=$1
  podman image exists "$image" || die "$image is not built: make image"
  rm -f "$file.tmp"
  podman save --quiet --format oci-archive -o "$file.tmp" "$image"
  skopeo inspect --format '{{.Digest}} {{.Os}}/{{.Architecture}}' "oci-archive:$file.tmp" >/dev/null ||
    die "skopeo cannot read the archive podman wrote"
  mv "$file.tmp" "$file"
  log "wrote $file ($(du -m "$file" | cut -f1) MB)"
}

case ${1:-} in
conf) conf && echo "$dropin" ;;
base) conf && base ;;
build) conf && build ;;
save) (($# == 2)) || die "usage: scripts/image.sh save FILE" && conf && save "$2" ;;
*)
  sed -n '4,12p' "$0" | cut -c3- >&2
  exit 2
  ;;
esac

# monoceph container image: Debian 13 (trixie) with its Ceph 18.2.7 (Reef) client.
#
# `make image` builds this file with buildah where no registry is reachable: it makes the two
# images below from Debian's archive (scripts/rootfs.sh) and the host's Go toolchain, under
# these exact names, so `docker build .` with pulled images builds the same thing.
#
# Why trixie: Debian's supported stable release, so its ceph packages get security updates;
# forky and sid (Ceph 20.2, Tentacle) are testing and unstable. Reef's client libraries talk to
# Pacific through Tentacle clusters (the end-to-end test runs this image against Pacific).
ARG DEBIAN_IMAGE=docker.io/library/debian:trixie-slim
ARG GO_IMAGE=docker.io/library/golang:1.26.8-trixie

FROM ${GO_IMAGE} AS go

# The binary is compiled against the very librados, librbd and libcephfs the runtime stage
# ships: same base, same Debian packages.
FROM ${DEBIAN_IMAGE} AS build
# apt honours an extra configuration file when given (make image bounds and retries it)
ARG APT_CONFIG
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      gcc libc6-dev make \
      librados-dev librbd-dev libcephfs-dev \
 && rm -rf /var/lib/apt/lists/*
COPY --from=go /usr/local/go /usr/local/go
ENV PATH=/usr/local/go/bin:$PATH CGO_ENABLED=1
WORKDIR /src
# Module downloads and the build honour these when given (make image points them at the
# host's module cache, CA bundle and build cache); unset, Go's defaults apply.
ARG GOPROXY
ARG SSL_CERT_FILE
ARG GOCACHE
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=devel
# The go-ceph build tag follows the libraries installed above (reef for Ceph 18.2).
RUN --mount=type=cache,target=/root/.cache/go-build \
    release=$(scripts/ceph-release.sh) \
 && make build CEPH_RELEASE="$release" VERSION="$VERSION" EXTRA_LDFLAGS="-s -w" \
 && echo "built monoceph $VERSION with go-ceph tag '$release' against Ceph $(dpkg-query -W -f '${Version}' librados-dev)"

FROM ${DEBIAN_IMAGE}
ARG APT_CONFIG
# ceph-common is here for `rbd` (and the compressor and crypto plugins librados loads): its
# other tools, 45 MB of them, stay out.
RUN printf 'path-exclude %s\n' /usr/bin/radosgw-admin '/usr/bin/cephfs-*' /usr/bin/ceph-syn \
      '/usr/bin/rbd-replay*' >/etc/dpkg/dpkg.cfg.d/monoceph-ceph-common
# What monoceph runs, and nothing else (grep the code for hostexec Run calls and LookPath):
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
# the Ceph C libraries monoceph links against: go-ceph's rados and rbd, and cephfs for the
# one thing librados cannot reach, commands to the MDS (listing and evicting a fenced node's
# sessions); volumes themselves go through the manager's volumes module over librados
      librados2 librbd1 libcephfs2 \
# `rbd device map/unmap/list`: how the krbd and rbd-nbd mounters attach images
      ceph-common \
# the CephFS fuse mounter
      ceph-fuse \
# the RBD nbd mounter's daemon
      rbd-nbd \
# fusermount3 and /etc/fuse.conf for libfuse, which ceph-fuse uses
      fuse3 \
# mkfs.ext4, e2fsck and resize2fs (formatting, checking and growing RBD volumes)
      e2fsprogs \
# mkfs.xfs and xfs_growfs
      xfsprogs \
# mount, umount and losetup (the fuse RBD mounter's loop device)
      mount \
# blkid, fsck and blockdev (mount-utils' format and resize)
      util-linux \
# modprobe ceph, to find out whether the kernel CephFS mounter can work
      kmod \
 && rm -rf /var/lib/apt/lists/* \
# a numeric non-root user for the controllers (the chart runs them as 65532); the node plugins
# run as root, privileged
 && groupadd --system --gid 65532 monoceph \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin monoceph
COPY --from=build /src/bin/monoceph /usr/local/bin/monoceph
ENTRYPOINT ["/usr/local/bin/monoceph"]

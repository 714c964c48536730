# monoceph container image. NOT BUILT IN CI: the build machines have no Docker engine.
#
# The binary is compiled inside the same Ceph image it runs in, so go-ceph links against exactly
# the librados/librbd/libcephfs the runtime ships. The image carries Ceph 19.2 (Squid), so the
# go-ceph build tag is "squid" (see the Makefile's CEPH_RELEASE).
ARG CEPH_IMAGE=quay.io/ceph/ceph:v19.2.3
ARG GO_IMAGE=docker.io/library/golang:1.26.8-bookworm

FROM ${GO_IMAGE} AS go

FROM ${CEPH_IMAGE} AS build
RUN dnf install -y --setopt=install_weak_deps=False gcc make git \
      librados-devel librbd-devel libcephfs-devel && dnf clean all
COPY --from=go /usr/local/go /usr/local/go
ENV PATH=/usr/local/go/bin:$PATH CGO_ENABLED=1
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=devel
RUN make build CEPH_RELEASE=squid VERSION=${VERSION}

FROM ${CEPH_IMAGE}
# ceph-common, ceph-fuse and rbd-nbd come with the Ceph image, rbd-fuse does not (the RBD
# `fuse` mounter needs it); the node plugin also formats and mounts filesystems and sets up
# loop devices.
RUN dnf install -y --setopt=install_weak_deps=False ceph-common ceph-fuse rbd-nbd rbd-fuse \
      e2fsprogs xfsprogs util-linux && dnf clean all
COPY --from=build /src/bin/monoceph /usr/local/bin/monoceph
ENTRYPOINT ["/usr/local/bin/monoceph"]

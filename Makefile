# monoceph — build, test, lint, bench and run against a local Ceph cluster.
#
# Ceph releases. CEPH_RELEASE is the release of the local cluster's daemons
# (scripts/ceph-local.sh): pacific (the default: Debian 12's own Ceph 16.2, the quickest here),
# reef (18.2) or tentacle (20.2). CEPH_CLIENT (default: CEPH_RELEASE) is the release of the Ceph
# C libraries, CLIs and FUSE clients that the driver and the tests are built and run with; it
# differs in cross-version runs only (CEPH_CLIENT=reef, the image's libraries, against a Pacific
# or Tentacle cluster).
# go-ceph selects the C API it compiles against with a build tag named after the oldest release
# it must support: CEPH_CLIENT is that tag (`tentacle` matches no go-ceph constraint, which gives
# the newest API; quincy and squid build where those libraries are installed).
# When CEPH_CLIENT's libraries are not the ones installed here (scripts/ceph-release.sh says
# which are), build, unit, test, sanity, faults, bench and test-core run inside that release's
# Debian root filesystem (scripts/ceph-root.sh: trixie for reef, forky for tentacle) with the
# host's Go toolchain, caches and tools, so that the libraries, the CLIs, ceph-fuse and rbd-fuse
# the tests use are the release's own.
CEPH_RELEASE ?= pacific
CEPH_CLIENT ?= $(CEPH_RELEASE)
export CEPH_RELEASE CEPH_CLIENT
export GOFLAGS := -tags=$(CEPH_CLIENT) -buildvcs=false
HOST_CEPH := $(shell scripts/ceph-release.sh 2>/dev/null)
IN_ROOT := $(if $(filter reef tentacle,$(CEPH_CLIENT)),$(filter-out $(HOST_CEPH),$(CEPH_CLIENT)))
export CGO_ENABLED := 1

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
# EXTRA_LDFLAGS: e.g. "-s -w" (the image's build strips symbol tables; stack traces keep names)
LDFLAGS := -X github.com/monoceph/monoceph/internal/version.version=$(VERSION) $(EXTRA_LDFLAGS)
BIN := bin
TOOLS := scripts/tools
CEPH_ENV := scripts/ceph-local.sh start >/dev/null && eval "$$(scripts/ceph-local.sh env)"
TEST_TIMEOUT ?= 30m
# keep the sanity output readable: Ginkgo's colours off, driver logs out (also those behind a
# spec's progress mark), results and skips in
SANITY_FILTER := sed 's/\x1b\[[0-9;]*m//g' | tee $(BIN)/sanity.log | grep -vE '^[•SP]*[IEW][0-9]{4} '
# what `make test` repeats at its end when a sanity suite fails, so a truncated log still says why
SANITY_FAILURES := \[FAILED\] (Unexpected error|Expected)|^ +\[FAIL\] |^--- FAIL|: the sanity run left

SHELL := /bin/bash
TEST_ENV := export MONOCEPH_INTEGRATION=1 MONOCEPH_BIN=$(CURDIR)/$(BIN)/monoceph MONOCEPH_CSI_ADDONS_BIN=$(CURDIR)/$(BIN)/csi-addons \
	MONOCEPH_KUBE_APISERVER_BIN=$(CURDIR)/$(BIN)/kube-apiserver MONOCEPH_ETCD_BIN=$(CURDIR)/$(BIN)/etcd \
	MONOCEPH_KUBE_CONTROLLER_MANAGER_BIN=$(CURDIR)/$(BIN)/kube-controller-manager

.PHONY: all build test sanity test-core test-features unit lint fmt bench run stop deps ceph-start ceph-stop clean tools e2e-tools e2e \
	faults sanity-encrypted test-vault test-keyrotation image image-base image-save test-releases test-matrix bench-matrix test-zones test-mirror soak

all: build

deps:
	scripts/install-deps.sh

TEST_TOOLS := $(BIN)/csi-addons $(BIN)/kube-apiserver $(BIN)/etcd $(BIN)/kube-controller-manager

ifneq ($(IN_ROOT),)
# CEPH_CLIENT's libraries are not installed here: the goal runs in that release's root
# filesystem (see the top), after what the root filesystem cannot do itself: download modules
# (Go runs there with GOPROXY=off), build the test tools (any libc runs them), start the
# cluster (CEPH_RELEASE's daemons run from their own root filesystem, which may be another one).
ENTER_ROOT = scripts/ceph-root.sh run $(IN_ROOT) $(MAKE) --no-print-directory $@ VERSION=$(VERSION)

build unit:
	@go mod download
	@$(ENTER_ROOT)

test sanity sanity-encrypted test-vault faults bench test-core test-features: $(TEST_TOOLS)
	@go mod download
	@scripts/ceph-local.sh start >/dev/null
	@$(ENTER_ROOT)

else
build:
	go build -ldflags "$(LDFLAGS)" -o $(BIN)/monoceph ./cmd/monoceph

# Unit and integration tests. Integration tests run against the local cluster (started here
# when it is not running) and fail, rather than skip, when it is unreachable.
# The csi-sanity suites (make sanity) run after the rest, and the fault-injection suite last.
# Each part runs and reports even when one before it failed (a Ceph daemon's death ends only the
# part that needs it: scripts/ceph-local.sh guard); the goal fails at the end naming the parts.
GUARD := scripts/ceph-local.sh guard
test: build $(TEST_TOOLS)
	@failed=; if $(CEPH_ENV) && $(TEST_ENV); then \
	  $(GUARD) go test -race -count=1 -timeout $(TEST_TIMEOUT) $$(go list ./... | grep -vE '/e2e/(sanity/|sanityenc/|kube$$)') || failed="go-test"; \
	  else failed="cluster"; fi; \
	  $(MAKE) --no-print-directory sanity || failed="$$failed sanity"; \
	  $(MAKE) --no-print-directory faults || failed="$$failed faults"; \
	  if [ -n "$$failed" ]; then echo "::: make test failed in: $$failed"; exit 1; fi

# The csi-sanity suites (e2e/sanity: RBD mount, RBD block, CephFS), one at a time: each starts
# a driver on the shared cluster, and an unfiltered ListSnapshots rightly sees the other
# suite's snapshots. The RBD suites use the fuse mounter, whose server is the driver itself
# (librbd of the libraries the suites run with), in a RADOS namespace.
sanity: build $(TEST_TOOLS)
	@set -o pipefail; rm -f $(BIN)/sanity.log; $(CEPH_ENV) && $(TEST_ENV) && \
	  $(GUARD) go test -count=1 -p 1 -timeout $(TEST_TIMEOUT) -v ./e2e/sanity/... 2>&1 | $(SANITY_FILTER) || \
	  { echo "::: csi-sanity failures (whole log: $(BIN)/sanity.log):"; grep -E -A3 "$(SANITY_FAILURES)" $(BIN)/sanity.log; exit 1; }

# The Vault KMS providers (internal/rbd/node's TestVault*, build tag vault) against a real
# Vault, `vault server -dev` (internal/vaulttest), and the local cluster. Not part of make test
# or CI: Vault's binary is all of Vault, and its cold build takes about 21 min on 2 cores (16
# min of CPU, 4 GB), a third of CI's budget; built once, the tier takes under 2 min.
# The key rotation tests (internal/rbd/node's TestEncryptionKeyRotation*, build tag
# keyrotation) on the local cluster. Not part of make test or CI while the stall they found
# (README: Key rotation) is open; the rotation's steps and header edits are unit-tested in
# internal/kms and internal/luks, which make test runs.
test-keyrotation: build
	@$(CEPH_ENV) && $(TEST_ENV) && \
	  $(GUARD) go test -race -count=1 -tags=$(CEPH_CLIENT),keyrotation -timeout $(TEST_TIMEOUT) -v -run '^TestEncryptionKey' ./internal/rbd/node/ 2>&1 | \
	  grep -vE '^[IEW][0-9]{4} '; test $${PIPESTATUS[0]} -eq 0

test-vault: build $(BIN)/vault
	@$(CEPH_ENV) && $(TEST_ENV) && export MONOCEPH_VAULT_BIN=$(CURDIR)/$(BIN)/vault && \
	  $(GUARD) go test -race -count=1 -tags=$(CEPH_CLIENT),vault -timeout $(TEST_TIMEOUT) -v -run '^TestVault' ./internal/rbd/node/ 2>&1 | \
	    grep -vE '^[IEW][0-9]{4} '; test $${PIPESTATUS[0]} -eq 0

# csi-sanity with every volume encrypted (e2e/sanityenc: mount, then block). Not part of make
# test or CI: each LUKS2 format and key load runs librbd's argon2id key derivation (about 2 s of
# CPU and up to 1 GiB of memory, by design), and a suite makes and stages dozens of volumes:
# the mount suite took 14 min here (2 cores shared with builds) against 45 s unencrypted, more
# than CI's budget has room for. Run it after a change to the encrypted path.
sanity-encrypted: build $(TEST_TOOLS)
	@set -o pipefail; $(CEPH_ENV) && $(TEST_ENV) && \
	  $(GUARD) go test -count=1 -p 1 -timeout 60m -v ./e2e/sanityenc/... 2>&1 | $(SANITY_FILTER)

# The suites that prove a release (CI runs them on Reef and Tentacle, make test runs them
# all): the three csi-sanity suites, changed blocks against `rbd diff` (the CBT oracle),
# fencing enforced on a real client, and the shallow-volume concurrency property.
# What only newer releases have is proven where they have it: changed blocks by snapshot ID
# (rbd_diff_iterate3: TestDiffBySnapshotID, here and in test-features), restores from group
# members by rbd_clone4 and CephFS group snapshots under the manager's real `fs quiesce`
# (test-features). Each test takes an older release's path where the feature is absent; EXPECT
# (MONOCEPH_EXPECT: the features this cluster and these libraries have) turns that fallback
# into a failure, so a release that should have a feature cannot pass without it.
CORE_TESTS := './internal/snapmeta:TestMatchesRBDDiff|TestCloneIncludesParent|TestDiffBySnapshotID' \
	./internal/fence:TestFencingIsEnforced ./internal/cephfs:TestShallowConcurrencyProperty
FEATURE_TESTS := ./internal/snapmeta:TestDiffBySnapshotID ./internal/rbd:TestGroupSnapshotLifecycle \
	./internal/cephfs:TestGroupSnapshotLifecycle
EXPECT ?=
# run_tests <package:regexp>...: each under the guard; a top-level skip fails too (these tests
# are the proof of a release, and a skipped one proves nothing). Every one runs; the line fails
# at the end naming those that failed.
run_tests = failed=; for t in $(1); do \
	  $(GUARD) env MONOCEPH_EXPECT=$(EXPECT) go test -race -count=1 -timeout $(TEST_TIMEOUT) -v "$${t%%:*}" -run "^($${t\#*:})$$" 2>&1 | \
	    grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic|\s+\S+_test\.go:)' | tee $(BIN)/tests.log; \
	  if [ $${PIPESTATUS[0]} -ne 0 ] || grep -q '^--- SKIP' $(BIN)/tests.log; then failed="$$failed $$t"; fi; done; \
	  if [ -n "$$failed" ]; then echo "::: failed or skipped:$$failed"; false; fi
test-core: build $(TEST_TOOLS)
	@failed=; { $(CEPH_ENV) && $(TEST_ENV) && $(call run_tests,$(CORE_TESTS)); } || failed=tests; \
	  $(MAKE) --no-print-directory sanity || failed="$$failed sanity"; \
	  if [ -n "$$failed" ]; then echo "::: make test-core failed in: $$failed"; exit 1; fi

test-features: build $(TEST_TOOLS)
	@$(CEPH_ENV) && $(TEST_ENV) && $(call run_tests,$(FEATURE_TESTS))

# The fault-injection suite (e2e/faults): the controllers as processes under CO-like load while
# the monitor, OSD, manager and the controllers themselves fail, then garbage requests; nothing
# may leak. It makes a BlueStore cluster of its own on other ports (its faults would disturb
# the shared one) and deletes it afterwards. `make test` runs it last.
FAULTS_TIMEOUT ?= 20m
faults: build
	@export MONOCEPH_FAULTS=1 MONOCEPH_BIN=$(CURDIR)/$(BIN)/monoceph && \
	  go test -count=1 -v -timeout $(FAULTS_TIMEOUT) ./e2e/faults/ 2>&1 | grep -vE '^([IEW][0-9]{4} |20[0-9]{2}-[0-9]{2}-[0-9]{2}T)' ; test $${PIPESTATUS[0]} -eq 0

# The two-zone cluster's tests (read affinity, topology-constrained pools): scripts/ceph-zones.sh
# starts a throwaway cluster of its own (its ports: CEPH_MON_V2_PORT/CEPH_MON_V1_PORT,
# CEPH_BIND_PORT_MIN/MAX, default 3800/3789 and 8600-9100, beside the default cluster), the
# TestZones tests run on it, and it is stopped and purged whatever they answer.
ZONES_TIMEOUT ?= 5m
# A skipped test fails the goal: these tests are the proof, and a skip proves nothing.
test-zones:
	@set -o pipefail; scripts/ceph-zones.sh start >/dev/null && eval "$$(scripts/ceph-zones.sh env)" && $(TEST_ENV) && \
	  go test -count=1 -v -timeout $(ZONES_TIMEOUT) -run '^TestZones' ./internal/rbd/attach/ ./internal/rbd/ 2>&1 | \
	    grep -vE '^[IEW][0-9]{4} ' | tee $(BIN)/zones.log; \
	  rc=$$?; scripts/ceph-zones.sh stop >/dev/null; \
	  if grep -q -- '--- SKIP' $(BIN)/zones.log; then echo "::: make test-zones: a test skipped"; rc=1; fi; exit $$rc

# Volume replication between two clusters (RBD snapshot mirroring): scripts/ceph-mirror.sh
# starts sites A and B (mon 3600/3689 and 3650/3699, daemons 7600-7800 and 7900-8100) with an
# rbd-mirror daemon each, TestMirror runs on them, and both are stopped and purged whatever it
# answers.
MIRROR_TIMEOUT ?= 15m
# A skipped test fails the goal, as in test-zones.
test-mirror: build
	@set -o pipefail; scripts/ceph-mirror.sh start >/dev/null && eval "$$(scripts/ceph-mirror.sh env)" && $(TEST_ENV) && \
	  go test -count=1 -v -timeout $(MIRROR_TIMEOUT) -run '^TestMirror' ./internal/rbd/ 2>&1 | \
	    grep -vE '^[IEW][0-9]{4} ' | tee $(BIN)/mirror.log; \
	  rc=$$?; scripts/ceph-mirror.sh stop >/dev/null; \
	  if grep -q -- '--- SKIP' $(BIN)/mirror.log; then echo "::: make test-mirror: a test skipped"; rc=1; fi; exit $$rc

# The soak (scripts/soak.sh): SOAK=packages (the snapshot-heavy packages) or make-test, N runs
# on the local cluster, with each run's time, daemon deaths and the snapshots the OSD trimmed.
# Not part of make test or CI (the ten runs of issue 25's soak take about an hour).
SOAK ?= packages
N ?= 10
soak: build $(TEST_TOOLS)
	@scripts/soak.sh $(SOAK) $(N)

# Unit tests only: integration tests skip themselves without a cluster.
unit:
	go test -count=1 ./...

# Benchmarks against the local cluster; each runs its own fixed sample sizes once and prints its
# ratio to a floor measured in the same run.
bench:
	@$(CEPH_ENV) && MONOCEPH_INTEGRATION=1 go test -run '^$$' -bench . -benchtime 1x -timeout 30m ./...
endif

# tool <binary>,<tools module>,<package>[,<variable with -ldflags>]: bin/<binary> is built from
# a tools module of our own under $(TOOLS), pinned there (the proxy refuses `go install`
# for most of them), and rebuilt when that module changes.
define tool
$(BIN)/$(1): $(TOOLS)/$(2)/go.mod $(TOOLS)/$(2)/go.sum
	cd $(TOOLS)/$(2) && GOFLAGS=-buildvcs=false go build$(if $(4), -ldflags "$$($(4))") -o $(CURDIR)/$(BIN)/$(1) $(3)
endef

# Linters, pinned in one tools module: staticcheck and goimports (x/tools at staticcheck's version).
$(eval $(call tool,staticcheck,lint,honnef.co/go/tools/cmd/staticcheck))
$(eval $(call tool,goimports,lint,golang.org/x/tools/cmd/goimports))

$(eval $(call tool,grpcurl,grpcurl,github.com/fullstorydev/grpcurl/cmd/grpcurl))

# The csi-addons project's own client (cmd/csi-addons), which the tests drive against the
# driver's csi-addons socket. `go install` of it is refused by the module proxy; a tools module
# of our own pins it instead.
$(eval $(call tool,csi-addons,csi-addons,github.com/csi-addons/kubernetes-csi-addons/cmd/csi-addons))

# The csi-addons controller manager (cmd/manager) and sidecar (sidecar/, the module's package
# path has no cmd/), from the same tools module, for the end-to-end tests.
$(eval $(call tool,csi-addons-manager,csi-addons,github.com/csi-addons/kubernetes-csi-addons/cmd/manager))
$(eval $(call tool,csi-addons-sidecar,csi-addons,github.com/csi-addons/kubernetes-csi-addons/sidecar))

# kube-apiserver and etcd for the tests of the Kubernetes-facing snapshot metadata service
# (TokenReview, SubjectAccessReview, VolumeSnapshot lookups). The version variables let
# client-go and kubectl parse the server's version. Cold build: ~6 min and ~2 GB for the
# apiserver, ~40 s for etcd.
KUBE_VERSION := v1.34.4
KUBE_LDFLAGS := -X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) -X k8s.io/component-base/version.gitMajor=1 \
	-X k8s.io/component-base/version.gitMinor=34 -X k8s.io/client-go/pkg/version.gitVersion=$(KUBE_VERSION)

$(eval $(call tool,kube-apiserver,kubernetes,k8s.io/kubernetes/cmd/kube-apiserver,KUBE_LDFLAGS))

# kubectl, from the same tools module, for the README's install (it creates the Ceph user
# Secrets, so that no key goes through Helm's values). Cold build: ~40 s once the apiserver's
# packages are cached.
$(eval $(call tool,kubectl,kubernetes,k8s.io/kubernetes/cmd/kubectl,KUBE_LDFLAGS))

# kube-controller-manager, from the same tools module as the apiserver, for the end-to-end tests:
# service accounts, namespace deletion and Deployments need its controllers (there is no kubelet,
# so pods stay Pending). Cold build: ~1 min, ~2.3 GB, once the apiserver's packages are cached.
$(eval $(call tool,kube-controller-manager,kubernetes,k8s.io/kubernetes/cmd/kube-controller-manager,KUBE_LDFLAGS))

$(eval $(call tool,etcd,etcd,go.etcd.io/etcd/server/v3))

# HashiCorp Vault v1.14.2 (MPL-2.0; its go.mod says why not a later 1.14), the real KMS the
# tests of the Vault providers run in dev mode (internal/vaulttest); build.sh patches one check of
# the sdk it pins. Cold build: ~21 min on 2 shared cores (~16 min of CPU), ~4 GB, a 377 MB
# binary: it is all of Vault's plugins and storage backends.
$(BIN)/vault: $(TOOLS)/vault/go.mod $(TOOLS)/vault/go.sum $(TOOLS)/vault/build.sh
	cd $(TOOLS)/vault && GOFLAGS= go mod tidy -diff
	$(TOOLS)/vault/build.sh $(CURDIR)/$(BIN)/vault

# Helm, to lint, template and install the driver's chart against the local apiserver (`--wait`
# never succeeds there: no nodes). The version variables are the ones Helm's own Makefile sets:
# without them `helm version` says v3.22, and `helm template` and `helm lint` assume Kubernetes
# v1.20 (client-go v0.37 → 1.37). Cold build: ~1 min, ~1 GB.
HELM_LDFLAGS := -X helm.sh/helm/v3/internal/version.version=v3.22.0 \
	-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=37 \
	-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=37

$(eval $(call tool,helm,helm,helm.sh/helm/v3/cmd/helm,HELM_LDFLAGS))

# The kubernetes-csi sidecars and the snapshot controller, all from one tools module: MVS lifts
# the provisioner's and resizer's Kubernetes libraries (v0.33) to the snapshotter's (v0.36), and
# the provisioner then compiles only with gateway-api v1.4.0 and controller-runtime v0.22, pinned
# there (gateway-api v1.3.0 is built on structured-merge-diff v4, client-go v0.36 on v6).
$(eval $(call tool,csi-provisioner,sidecars,github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner))
$(eval $(call tool,csi-snapshotter,sidecars,github.com/kubernetes-csi/external-snapshotter/v8/cmd/csi-snapshotter))
$(eval $(call tool,snapshot-controller,sidecars,github.com/kubernetes-csi/external-snapshotter/v8/cmd/snapshot-controller))
$(eval $(call tool,csi-attacher,sidecars,github.com/kubernetes-csi/external-attacher/v4/cmd/csi-attacher))
$(eval $(call tool,csi-resizer,sidecars,github.com/kubernetes-csi/external-resizer/v2/cmd/csi-resizer))

tools: $(BIN)/staticcheck $(BIN)/goimports $(BIN)/grpcurl $(BIN)/csi-addons $(BIN)/kube-apiserver $(BIN)/etcd e2e-tools

# Everything the end-to-end tests run besides the driver: a control plane without a kubelet,
# Helm and kubectl, the CSI sidecars and the csi-addons controller and sidecar.
e2e-tools: $(BIN)/helm $(BIN)/kubectl $(BIN)/kube-controller-manager $(BIN)/kube-apiserver $(BIN)/etcd \
	$(BIN)/csi-provisioner $(BIN)/csi-attacher $(BIN)/csi-snapshotter $(BIN)/snapshot-controller $(BIN)/csi-resizer \
	$(BIN)/csi-addons-manager $(BIN)/csi-addons-sidecar

# gofmt and goimports (imports grouped, std first, this module's as third-party), go vet,
# staticcheck, go.mod/go.sum exactly as `go mod tidy` would leave them (the driver's module and
# every tools module), and every package listed in the README's Layout.
lint: $(BIN)/staticcheck $(BIN)/goimports
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@out=$$($(BIN)/goimports -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "goimports needed (make fmt):"; echo "$$out"; exit 1; fi
	@# not the Vault tools module: tidying it downloads all of Vault's dependencies (its own
	@# goal, make test-vault, checks it)
	@for m in . $$(ls -d $(TOOLS)/*/ | grep -v '/vault/$$'); do (cd $$m && GOFLAGS= go mod tidy -diff >/dev/null) || { echo "go mod tidy needed in $$m:"; (cd $$m && GOFLAGS= go mod tidy -diff); exit 1; }; done
	go vet ./...
	$(BIN)/staticcheck ./...
	@# the Vault and key rotation tests (make test-vault, make test-keyrotation) build only with their tags
	go vet -tags=$(CEPH_CLIENT),vault,keyrotation ./internal/rbd/node/
	$(BIN)/staticcheck -tags=$(CEPH_CLIENT),vault,keyrotation ./internal/rbd/node/
	scripts/check-layout.sh

fmt: $(BIN)/goimports
	gofmt -w $$(git ls-files '*.go')
	$(BIN)/goimports -w $$(git ls-files '*.go')

# End-to-end: the Helm chart on a real kube-apiserver, kube-controller-manager and etcd (no
# kubelet: the test binds the chart's pods and runs monoceph's containers with podman from the
# image built here, the real sidecars as local processes), against the local Ceph cluster.
# Also lints the chart and validates its objects with server-side dry runs.
# CEPH_RELEASE picks the cluster; the driver is always the image (Reef's libraries), and the
# test and the monoceph it runs here (changed-blocks) are built with this host's libraries.
E2E_TIMEOUT ?= 20m
e2e: e2e-tools image
	@$(MAKE) --no-print-directory build CEPH_CLIENT=$(HOST_CEPH)
	@$(CEPH_ENV) && export GOFLAGS="-tags=$(HOST_CEPH) -buildvcs=false" MONOCEPH_INTEGRATION=1 MONOCEPH_E2E=1 MONOCEPH_E2E_BIN=$(CURDIR)/$(BIN) \
	  MONOCEPH_KUBE_APISERVER_BIN=$(CURDIR)/$(BIN)/kube-apiserver MONOCEPH_ETCD_BIN=$(CURDIR)/$(BIN)/etcd \
	  MONOCEPH_KUBE_CONTROLLER_MANAGER_BIN=$(CURDIR)/$(BIN)/kube-controller-manager && \
	  $(GUARD) go test -count=1 -v -timeout $(E2E_TIMEOUT) ./e2e/kube/ 2>&1 | grep -vE '^[IEW][0-9]{4} ' ; test $${PIPESTATUS[0]} -eq 0

# Other Ceph releases, one cluster at a time: they share the ports (CEPH_MON_V2_PORT, ...), and
# a cluster keeps its release, so each lives in a directory of its own: CEPH_DIR-<release>
# where CEPH_DIR is set, else the release's default (scripts/ceph-local.sh).
RELEASE_DIR = $(if $(CEPH_DIR),CEPH_DIR=$(CEPH_DIR)-$(1))
# run_release <release> <client> <goals>: the goals against that release's cluster, which
# is stopped afterwards, also when they failed (the next release's cluster needs the ports)
run_release = ($(MAKE) --no-print-directory $(3) CEPH_RELEASE=$(1) CEPH_CLIENT=$(2) $(call RELEASE_DIR,$(1)); rc=$$?; \
	CEPH_RELEASE=$(1) $(call RELEASE_DIR,$(1)) scripts/ceph-local.sh stop >/dev/null; exit $$rc)

# What CI proves on Reef and Tentacle after the Pacific suites, as the driver meets them in
# production (11 minutes measured here with the root filesystems cached, the two clusters made
# from scratch and other suites running beside; about 2 more per root filesystem to build):
#   Reef cluster, Reef libraries (the container image's client on its own release): test-core;
#   Tentacle cluster, the host's Pacific libraries (the widest gap: a driver built years before
#     its cluster): test-core;
#   Tentacle cluster, Reef libraries (the image against the newest cluster): csi-sanity.
# Then Tentacle's own libraries (a driver built on forky) run test-features (the features only
# they have; everything else with them is in make test-matrix). Reef and Tentacle
# daemons and Reef's libraries come from their root filesystems (scripts/ceph-root.sh, cached in
# /var/cache/monoceph/rootfs). The Pacific cluster of the earlier goals is stopped first (same
# ports; a cluster stopped with `stop` keeps its data).
# The features each release has (see FEATURE_TESTS): Reef's librbd diffs by snapshot ID from
# 18.2.5; Squid and later also clone by ID and quiesce CephFS (the manager's: any client).
EXPECT_REEF := rbd_diff_iterate3
EXPECT_TENTACLE := fs_quiesce,rbd_diff_iterate3,rbd_clone4
test-releases:
	@scripts/ceph-local.sh stop >/dev/null
	@failed=; \
	  $(call run_release,reef,reef,test-core EXPECT=$(EXPECT_REEF)) || failed="reef/reef"; \
	  $(call run_release,tentacle,pacific,test-core) || failed="$$failed tentacle/pacific"; \
	  $(call run_release,tentacle,reef,sanity) || failed="$$failed tentacle/reef"; \
	  $(call run_release,tentacle,tentacle,test-features EXPECT=$(EXPECT_TENTACLE)) || failed="$$failed tentacle/tentacle"; \
	  if [ -n "$$failed" ]; then echo "::: make test-releases failed (cluster/client): $$failed"; exit 1; fi

# Everything on every release: make test (integration, crash, csi-sanity and fault suites) and
# make e2e on Pacific, Reef and Tentacle, then the cross-version runs: test-core with the host's
# Pacific libraries against Reef and Tentacle, csi-sanity with the default image's libraries
# (Reef's) against Pacific and Tentacle. Over an hour on 2 cores.
test-matrix:
	@scripts/ceph-local.sh stop >/dev/null
	@$(call run_release,pacific,pacific,test e2e)
	@$(call run_release,reef,reef,test e2e)
	@$(call run_release,tentacle,tentacle,test e2e)
	@$(call run_release,reef,pacific,test-core)
	@$(call run_release,tentacle,pacific,test-core)
	@$(call run_release,pacific,reef,sanity)
	@$(call run_release,tentacle,reef,sanity)

# make bench on every release, each against its own cluster (README, Ceph releases).
bench-matrix:
	@scripts/ceph-local.sh stop >/dev/null
	@$(call run_release,pacific,pacific,bench)
	@$(call run_release,reef,reef,bench)
	@$(call run_release,tentacle,tentacle,bench)

# The container image (Dockerfile) built with buildah from base images made here, no registry
# needed (scripts/image.sh; the Debian base comes from scripts/rootfs.sh, cached in
# /var/cache/monoceph/rootfs). IMAGE_SUITE is the Debian release of the image: trixie has Ceph
# 18.2.7 (Reef). IMAGE is the chart's default image; its tag is the chart's appVersion.
# IMAGE_BUILD_ARGS adds arguments to buildah bud.
IMAGE_SUITE ?= trixie
IMAGE_TAG := $(shell awk '/^appVersion:/ {gsub(/"/, "", $$2); print $$2}' charts/monoceph/Chart.yaml)
IMAGE ?= quay.io/monoceph/monoceph:$(IMAGE_TAG)
IMAGE_ENV := IMAGE=$(IMAGE) IMAGE_SUITE=$(IMAGE_SUITE) VERSION=$(VERSION)

image-base:
	$(IMAGE_ENV) scripts/image.sh base

image:
	$(IMAGE_ENV) scripts/image.sh build

# An OCI archive of the image, to copy into a registry with skopeo (README, Container image).
image-save: image
	$(IMAGE_ENV) scripts/image.sh save $(BIN)/monoceph-$(IMAGE_TAG).oci.tar

# Install packages, start the local cluster, run the driver in all-in-one mode and show it working.
run: deps build $(BIN)/grpcurl
	scripts/run-local.sh

stop:
	scripts/run-local.sh stop

ceph-start:
	scripts/ceph-local.sh start

ceph-stop:
	scripts/ceph-local.sh stop

clean:
	rm -rf $(BIN)

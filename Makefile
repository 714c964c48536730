# monoceph — build, test, lint, bench and run against a local Ceph cluster.
#
# go-ceph selects the Ceph C API it compiles against with a build tag named after the oldest
# Ceph release it must support. Debian 12 ships Ceph 16.2 (Pacific), hence the default below.
# Against newer libraries: CEPH_RELEASE=quincy|reef|squid, or CEPH_RELEASE= (empty) for the
# newest release go-ceph v0.40.0 knows (Tentacle, 20.x).
CEPH_RELEASE ?= pacific
export GOFLAGS := -tags=$(CEPH_RELEASE) -buildvcs=false
export CGO_ENABLED := 1

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
LDFLAGS := -X github.com/monoceph/monoceph/internal/version.version=$(VERSION)
BIN := bin
TOOLS := scripts/tools
CEPH_ENV := scripts/ceph-local.sh start >/dev/null && eval "$$(scripts/ceph-local.sh env)"
TEST_TIMEOUT ?= 30m

.PHONY: all build test unit lint fmt bench run stop deps ceph-start ceph-stop clean tools

all: build

deps:
	scripts/install-deps.sh

build:
	go build -ldflags "$(LDFLAGS)" -o $(BIN)/monoceph ./cmd/monoceph

# Unit and integration tests. Integration tests run against the local cluster (started here
# when it is not running) and fail, rather than skip, when it is unreachable.
test: build
	@$(CEPH_ENV) && MONOCEPH_INTEGRATION=1 go test -race -count=1 -timeout $(TEST_TIMEOUT) ./...

# Unit tests only: integration tests skip themselves without a cluster.
unit:
	go test -count=1 ./...

$(BIN)/staticcheck: $(TOOLS)/staticcheck/go.mod $(TOOLS)/staticcheck/go.sum
	cd $(TOOLS)/staticcheck && GOFLAGS=-buildvcs=false go build -o $(CURDIR)/$(BIN)/staticcheck honnef.co/go/tools/cmd/staticcheck

$(BIN)/grpcurl: $(TOOLS)/grpcurl/go.mod $(TOOLS)/grpcurl/go.sum
	cd $(TOOLS)/grpcurl && GOFLAGS=-buildvcs=false go build -o $(CURDIR)/$(BIN)/grpcurl github.com/fullstorydev/grpcurl/cmd/grpcurl

tools: $(BIN)/staticcheck $(BIN)/grpcurl

lint: $(BIN)/staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet ./...
	$(BIN)/staticcheck ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

# Benchmarks against the local cluster; each runs its own fixed sample sizes once and prints its
# ratio to a floor measured in the same run.
bench:
	@$(CEPH_ENV) && MONOCEPH_INTEGRATION=1 go test -run '^$$' -bench . -benchtime 1x -timeout 30m ./...

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

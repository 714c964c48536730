#!/usr/bin/env bash
# code-metrics.sh - the shape of the code, measured from the code: how many packages, the
# longest function and every function over 80 lines (non-test code; -tests counts tests too),
# the service packages (those serving a gRPC service, found by their embedded
# Unimplemented...Server, and the out-of-service fencer) and every import from one service
# package into another or from a mechanism into a service (cmd/, internal/driver and e2e/
# wire services together and are left out), then the duplicated blocks `duplicates` reports,
# where that tool is installed. Flags go to scripts/code-metrics.go (-limit N, -tests).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export GOFLAGS="${GOFLAGS:--tags=pacific -buildvcs=false}"
printf '%-41s%s\n' "packages (go list ./...)" "$(go list ./... | wc -l)"
go run scripts/code-metrics.go "$@"
if command -v duplicates >/dev/null; then
  printf '%-41s%s\n' "duplicated blocks (duplicates)" "$(duplicates --seconds 300 | head -1)"
fi

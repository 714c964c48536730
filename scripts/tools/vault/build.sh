#!/usr/bin/env bash
# build.sh OUT: builds bin/vault from this tools module, with one patch to the sdk it pins.
#
# Vault v1.14.2's own tree carries enterprise stub paths (sys/managed-keys/...) that define a
# CreateOperation without an ExistenceCheck; its in-tree sdk accepts them, the published sdk
# v0.9.2 (see go.mod) panics on them at the first request to sys ("defines a CreateOperation
# but no ExistenceCheck"), which `vault server -dev` makes at start. The patch removes that
# coding-error check from a copy of the sdk, used through a go.work outside the repository, so
# that the module itself stays as `go mod tidy` leaves it.
set -euo pipefail
out=$1
cd "$(dirname "${BASH_SOURCE[0]}")"
work=$(mktemp -d /tmp/monoceph-vault-build.XXXXXX)
trap 'chmod -R u+w "$work"; rm -rf "$work"' EXIT
src=$(GOFLAGS=-mod=mod go mod download -json github.com/hashicorp/vault/sdk@v0.9.2 | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
cp -r "$src" "$work/sdk"
chmod -R u+w "$work/sdk"
f=$work/sdk/framework/backend.go
python3 - "$f" <<'PY'
import sys
p = sys.argv[1]
s = open(p).read()
start = s.index("\t\t// Detect the coding error of attempting to define a CreateOperation without defining an ExistenceCheck\n")
end = s.index("\t\t// Automatically anchor the pattern\n")
open(p, "w").write(s[:start] + s[end:])
PY
cat > "$work/go.work" <<WORK
go 1.26.0

use $PWD

replace github.com/hashicorp/vault/sdk => $work/sdk
WORK
GOWORK=$work/go.work GOFLAGS=-buildvcs=false go build -o "$out" github.com/hashicorp/vault

#!/usr/bin/env bash
# check-layout.sh - fails when a Go package of the module is missing from the README's Layout
# block (one line per package, starting with its directory and a slash), or the block names a
# directory that is no package any more. make lint runs it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
listed=$(awk '/^### Layout/{f=1; next} f && /^```/{n++; if (n==2) exit; next} f && n==1 {print $1}' README.md | grep -E '^(cmd|api|internal|e2e)/' | sed 's#/$##' | sort)
packages=$(go list -f '{{.Dir}}' ./... | sed "s#^$PWD/##" | sort)
missing=$(comm -13 <(echo "$listed") <(echo "$packages"))
stale=$(comm -23 <(echo "$listed") <(echo "$packages"))
if [[ -n $missing || -n $stale ]]; then
  [[ -z $missing ]] || printf 'README Layout lacks these packages:\n%s\n' "$missing"
  [[ -z $stale ]] || printf 'README Layout names directories that are no packages:\n%s\n' "$stale"
  exit 1
fi

#!/usr/bin/env bash
# soak.sh packages|make-test N — repeat a test tier N times on the local dev cluster and say
# whether the cluster held: each run's wall time and result, every Ceph daemon that died or was
# restarted (by pid) and each crash dump written, and how many snapshots the OSD trimmed
# meanwhile (scripts/snaptrims.py reads them from the OSD maps).
#
#   packages   the snapshot-heavy packages (internal/rbd, internal/snapmeta, internal/cephfs),
#              `go test -count=1` under scripts/ceph-local.sh guard, as make test runs them
#              but without -race (SOAK_GOTEST_FLAGS to change): the load is on Ceph
#   make-test  the whole `make test` (go test of every package, csi-sanity, faults)
#
# It stops at nothing: every run runs, and the exit status is 1 when any run failed or any
# daemon died. Output ends with a summary table; per-run logs go to $SOAK_DIR (default
# bin/soak). Needs what make test needs (bin/ test tools, scripts/install-deps.sh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

mode=${1:?usage: $0 packages|make-test N}
n=${2:?usage: $0 packages|make-test N}
[[ $mode == packages || $mode == make-test ]] || { echo "usage: $0 packages|make-test N" >&2; exit 2; }
SOAK_DIR=${SOAK_DIR:-bin/soak}
mkdir -p "$SOAK_DIR"

scripts/ceph-local.sh start >/dev/null
eval "$(scripts/ceph-local.sh env)"
# the Makefile's: go-ceph's build tag is the release of the host's Ceph libraries
export GOFLAGS=${GOFLAGS:--tags=$(scripts/ceph-release.sh) -buildvcs=false}
export MONOCEPH_INTEGRATION=1 MONOCEPH_BIN=$PWD/bin/monoceph MONOCEPH_CSI_ADDONS_BIN=$PWD/bin/csi-addons \
  MONOCEPH_KUBE_APISERVER_BIN=$PWD/bin/kube-apiserver MONOCEPH_ETCD_BIN=$PWD/bin/etcd \
  MONOCEPH_KUBE_CONTROLLER_MANAGER_BIN=$PWD/bin/kube-controller-manager
[[ $mode == make-test ]] || make --no-print-directory build >/dev/null

pids() { local d; for d in mon.a mgr.x osd.0 mds.a; do printf '%s=%s ' "$d" "$(cat "$CEPH_DIR/run/$d.pid" 2>/dev/null)"; done; }
crashes() { find "$CEPH_DIR/crash" -mindepth 1 -maxdepth 1 -newer "$SOAK_DIR/.start" 2>/dev/null | sort; }

touch "$SOAK_DIR/.start"
/usr/bin/python3 scripts/snaptrims.py "$SOAK_DIR/snaptrims.json" &
trims=$!
trap 'kill $trims 2>/dev/null || true' EXIT

bad=0 summary=()
for i in $(seq 1 "$n"); do
  before=$(pids) t0=$SECONDS log=$SOAK_DIR/$mode-$i.log
  echo "::: soak $mode run $i/$n started $(date -u +%H:%M:%S) (log $log)"
  if [[ $mode == packages ]]; then
    # shellcheck disable=SC2086
    scripts/ceph-local.sh guard go test -count=1 -timeout 30m ${SOAK_GOTEST_FLAGS:-} \
      ./internal/rbd ./internal/snapmeta ./internal/cephfs >"$log" 2>&1 && rc=0 || rc=$?
  else
    make --no-print-directory test >"$log" 2>&1 && rc=0 || rc=$?
  fi
  after=$(pids) secs=$((SECONDS - t0))
  verdict=passed
  ((rc == 0)) || { verdict="FAILED (exit $rc)"; bad=1; }
  if [[ $before != "$after" ]]; then verdict="$verdict; daemons changed: $before-> $after"; bad=1; fi
  grep -E '^(ok|FAIL|---) |CEPH DAEMON DIED|::: ' "$log" | grep -v -- '--- PASS' | tail -n 40 || true
  summary+=("$(printf '%-10s run %2d  %5d s  %s' "$mode" "$i" "$secs" "$verdict")")
done

kill -TERM $trims && wait $trims || true
trap - EXIT
echo "::: soak summary ($(date -u +%F), $(nproc) cores, $(awk '$1 == "osd" && $2 == "objectstore" {print $4}' "$CEPH_CONF") OSD, Ceph $(ceph --version | awk '{print $3}'))"
printf '%s\n' "${summary[@]}"
c=$(crashes)
echo "crash dumps written: ${c:-none}"
[[ -z $c ]] || bad=1
echo "snapshots (from the OSD maps): $(cat "$SOAK_DIR/snaptrims.json")"
exit $bad

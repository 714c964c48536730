#!/usr/bin/env bash
# ceph-zones.sh - a two-zone Ceph cluster for the read affinity and topology tests: the
# cluster of scripts/ceph-local.sh plus a second OSD, each OSD under a host of its own in a
# CRUSH zone of its own (osd.0: zone z1/host h1, osd.1: zone z2/host h2), and three pools:
#   $CEPH_ZONES_POOL (default zoned)  size 2, one replica per zone (rule "by-zone")
#   $CEPH_ZONES_POOL-z1, -z2          size 1, kept in that zone (rules "in-z1", "in-z2")
#
#   start     start it (always fresh: it is a throwaway) and print ceph-local.sh's env lines
#             plus CEPH_ZONES_POOL
#   stop      stop osd.1, then ceph-local.sh stop --purge --kill
#   env       print the env lines of a running cluster
#
# Ports and directories are ceph-local.sh's variables; this script's defaults are its own
# (CI: mon 3800/3789, daemons 8600-9100) so that it runs beside the default cluster. memstore
# by default: the tests write a few hundred MiB and throw the cluster away.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export CEPH_DIR=${CEPH_DIR:-${TMPDIR:-/tmp}/monoceph-ceph-zones}
export CEPH_MON_V2_PORT=${CEPH_MON_V2_PORT:-3800}
export CEPH_MON_V1_PORT=${CEPH_MON_V1_PORT:-3789}
export CEPH_BIND_PORT_MIN=${CEPH_BIND_PORT_MIN:-8600}
export CEPH_BIND_PORT_MAX=${CEPH_BIND_PORT_MAX:-9100}
export CEPH_OBJECTSTORE=${CEPH_OBJECTSTORE:-memstore}
POOL=${CEPH_ZONES_POOL:-zoned}
PGS=${CEPH_ZONES_PGS:-32}
CONF=$CEPH_DIR/ceph.conf

[[ ${CEPH_RELEASE:-pacific} == pacific ]] || { echo "ceph-zones.sh: pacific daemons only (the host's)" >&2; exit 2; }
clean() { env -i -C / PATH="$PATH" HOME="${HOME:-/root}" LANG=C.UTF-8 "$@"; }
c() { clean timeout 60 ceph -c "$CONF" --connect-timeout 15 "$@"; }
log() { echo "[ceph-zones] $*" >&2; }

wait_for() { # wait_for <what> <command...>
  local what=$1 i
  shift
  for ((i = 0; i < 120; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 1
  done
  log "ERROR: timed out waiting for $what"
  exit 1
}
two_up() { c osd stat -f json | grep -q '"num_up_osds":2'; }
pgs_clean() { c pg stat | grep -Eq '^[0-9]+ pgs: [0-9]+ active\+clean;'; }

cmd_start() {
  cmd_stop >/dev/null 2>&1 || true # a throwaway: whatever ran here before goes, osd.1 included
  "$HERE/ceph-local.sh" start --fresh >/dev/null
  # OSDs keep the locations given here, not host=<hostname> at every start
  c config set osd osd_crush_update_on_start false
  local uuid id
  uuid=$(cat /proc/sys/kernel/random/uuid)
  id=$(c osd new "$uuid")
  [[ $id == 1 ]] || { log "ERROR: unexpected osd id '$id'"; exit 1; }
  mkdir -p "$CEPH_DIR/osd/1"
  c auth get-or-create osd.1 mon 'allow profile osd' mgr 'allow profile osd' osd 'allow *' -o "$CEPH_DIR/osd/1/keyring" >/dev/null
  clean ceph-osd -c "$CONF" -i 1 --mkfs --osd-uuid "$uuid" >"$CEPH_DIR/log/osd.1.mkfs.log" 2>&1 ||
    { cat "$CEPH_DIR/log/osd.1.mkfs.log" >&2; exit 1; }
  clean ceph-osd -c "$CONF" -i 1
  wait_for "osd.1 up" two_up
  for z in 1 2; do
    c osd crush add-bucket "z$z" zone >/dev/null
    c osd crush move "z$z" root=default >/dev/null
    c osd crush add-bucket "h$z" host >/dev/null
    c osd crush move "h$z" zone="z$z" >/dev/null
    c osd crush set "osd.$((z - 1))" 1.0 root=default zone="z$z" host="h$z" >/dev/null
    c osd crush rule create-replicated "in-z$z" "z$z" osd >/dev/null
  done
  c osd crush rule create-replicated by-zone default zone >/dev/null
  c osd pool create "$POOL" "$PGS" "$PGS" replicated by-zone >/dev/null
  c osd pool set "$POOL" size 2 --yes-i-really-mean-it >/dev/null
  c osd pool set "$POOL" min_size 1 >/dev/null
  clean timeout 60 rbd -c "$CONF" pool init "$POOL"
  for z in 1 2; do
    c osd pool create "$POOL-z$z" 8 8 replicated "in-z$z" >/dev/null
    clean timeout 60 rbd -c "$CONF" pool init "$POOL-z$z"
  done
  wait_for "PGs active+clean" pgs_clean
  echo "export CEPH_ZONES_POOL=$POOL" >>"$CEPH_DIR/env"
  log "two zones ready: osd.0 in z1, osd.1 in z2; pools $POOL (size 2 over both), $POOL-z1, $POOL-z2"
  cat "$CEPH_DIR/env"
}

cmd_stop() {
  local pid
  if pid=$(cat "$CEPH_DIR/run/osd.1.pid" 2>/dev/null) && [[ $(cat "/proc/$pid/comm" 2>/dev/null) == ceph-osd ]]; then
    kill -KILL "$pid" 2>/dev/null || true
  fi
  "$HERE/ceph-local.sh" stop --purge --kill
}

case ${1:-} in
start) cmd_start ;;
stop) cmd_stop ;;
env) "$HERE/ceph-local.sh" env ;;
*) echo "usage: $0 start | stop | env" >&2; exit 2 ;;
esac

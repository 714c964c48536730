#!/usr/bin/env bash
# ceph-mirror.sh - two throwaway clusters of scripts/ceph-local.sh, site A and site B, that
# mirror the RBD pool $CEPH_RBD_POOL (default rbd) to each other with snapshot-based RBD
# mirroring, for the volume replication tests (make test-mirror).
#
#   start            start both (always fresh: they are throwaways), enable mirroring in image
#                    mode on the pool of each, peer them (rbd mirror pool peer bootstrap
#                    create on A, import rx-tx on B), run one rbd-mirror daemon per site, and
#                    write $MIRROR_CONFIG (printed as MONOCEPH_MIRROR_CONFIG=...)
#   stop             stop both rbd-mirror daemons and both clusters, and purge their directories
#   stop-site a|b    stop one site's rbd-mirror and cluster (a lost site; its data is kept)
#   start-site a|b   start that site's cluster and rbd-mirror again
#   env              print the export line of the running pair
#
# Each site is ceph-local.sh with its own directory and ports (mon v2/v1, daemon range):
#   A: $CEPH_MIRROR_A_DIR (default ${TMPDIR:-/tmp}/monoceph-mirror-a), 3600/3689, 7600-7800
#   B: $CEPH_MIRROR_B_DIR (default ${TMPDIR:-/tmp}/monoceph-mirror-b), 3650/3699, 7900-8100
# (CEPH_MIRROR_{A,B}_{V2,V1,MIN,MAX} move the ports.) memstore by default: the tests write a few
# hundred MiB and throw the clusters away. Cluster IDs: site-a and site-b.
#
# MONOCEPH_MIRROR_CONFIG is a JSON file (0600, it holds the admin keys):
#   {"script": <this script>, "pool": <pool>, "sites": [{"name":"a","clusterID":"site-a",
#    "monitors":..,"adminID":"admin","adminKey":..,"poolID":N,"dir":..}, {...b...}]}
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
A_DIR=$(realpath -m "${CEPH_MIRROR_A_DIR:-${TMPDIR:-/tmp}/monoceph-mirror-a}")
B_DIR=$(realpath -m "${CEPH_MIRROR_B_DIR:-${TMPDIR:-/tmp}/monoceph-mirror-b}")
POOL=${CEPH_RBD_POOL:-rbd}
MIRROR_CONFIG=$A_DIR/../$(basename "$A_DIR")-mirror.json
MIRROR_CONFIG=$(realpath -m "$MIRROR_CONFIG")

[[ ${CEPH_RELEASE:-pacific} == pacific ]] || { echo "ceph-mirror.sh: pacific daemons only (the host's)" >&2; exit 2; }
clean() { env -i -C / PATH="$PATH" HOME="${HOME:-/root}" LANG=C.UTF-8 "$@"; }
log() { echo "[ceph-mirror] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# site <a|b>: the ceph-local.sh variables of that site, exported for the calls that follow
site() {
  case $1 in
  a) export CEPH_DIR=$A_DIR CEPH_MON_V2_PORT=${CEPH_MIRROR_A_V2:-3600} CEPH_MON_V1_PORT=${CEPH_MIRROR_A_V1:-3689} \
    CEPH_BIND_PORT_MIN=${CEPH_MIRROR_A_MIN:-7600} CEPH_BIND_PORT_MAX=${CEPH_MIRROR_A_MAX:-7800} MONOCEPH_CLUSTER_ID=site-a ;;
  b) export CEPH_DIR=$B_DIR CEPH_MON_V2_PORT=${CEPH_MIRROR_B_V2:-3650} CEPH_MON_V1_PORT=${CEPH_MIRROR_B_V1:-3699} \
    CEPH_BIND_PORT_MIN=${CEPH_MIRROR_B_MIN:-7900} CEPH_BIND_PORT_MAX=${CEPH_MIRROR_B_MAX:-8100} MONOCEPH_CLUSTER_ID=site-b ;;
  *) die "no site '$1' (a or b)" ;;
  esac
  export CEPH_OBJECTSTORE=${CEPH_OBJECTSTORE:-memstore} CEPH_RBD_POOL=$POOL
  CONF=$CEPH_DIR/ceph.conf
}
c() { clean timeout 60 ceph -c "$CONF" --connect-timeout 15 "$@"; }
r() { clean timeout 60 rbd -c "$CONF" "$@"; }

# rbd-mirror runs in the foreground (-f) in a session of its own, as client.admin (a throwaway
# rig: no separate mirror user to set up). It reports each image's mirroring status (what
# GetVolumeReplicationInfo reads) every second instead of Ceph's 30: the tests measure the
# copy, not the report's period. Its PID is found by its command line (this site's ceph.conf),
# not by $!: a background shell function is a subshell, and $! names that subshell.
mirror_pids() {
  local p cmd
  for p in /proc/[0-9]*; do
    cmd=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") || continue
    [[ $cmd == "rbd-mirror -f -c $CONF "* ]] && echo "${p#/proc/}"
  done
  return 0
}

start_mirror() {
  local i
  [[ -z $(mirror_pids) ]] || return 0
  # its pool replayers read the local cluster's config from CEPH_CONF, not from -c
  env -i -C / PATH="$PATH" HOME="${HOME:-/root}" LANG=C.UTF-8 CEPH_CONF="$CONF" \
    setsid rbd-mirror -f -c "$CONF" --id admin --log-file "$CEPH_DIR/log/rbd-mirror.log" \
    --admin-socket "$CEPH_DIR/run/rbd-mirror.asok" --rbd-mirror-pool-replayers-refresh-interval 5 \
    --rbd-mirror-image-state-check-interval 1 \
    </dev/null >>"$CEPH_DIR/log/rbd-mirror.out" 2>&1 &
  for ((i = 0; i < 50; i++)); do
    [[ -n $(mirror_pids) ]] && break
    sleep 0.1
  done
  [[ -n $(mirror_pids) ]] || die "rbd-mirror of $CEPH_DIR did not start (see $CEPH_DIR/log/rbd-mirror.out)"
  mirror_pids >"$CEPH_DIR/run/rbd-mirror.pid"
}

# stop_mirror: SIGTERM, then SIGKILL after 10 s: rbd-mirror's orderly shutdown can wait for a
# cluster that is already gone.
stop_mirror() {
  local pids p i
  pids=$(mirror_pids)
  [[ -n $pids ]] || { rm -f "$CEPH_DIR/run/rbd-mirror.pid"; return 0; }
  for p in $pids; do kill -TERM "$p" 2>/dev/null || true; done
  for ((i = 0; i < 100; i++)); do
    [[ -n $(mirror_pids) ]] || break
    sleep 0.1
  done
  for p in $(mirror_pids); do kill -KILL "$p" 2>/dev/null || true; done
  rm -f "$CEPH_DIR/run/rbd-mirror.pid"
}

# value <env file> <variable>
value() { (set +u; . "$1"; eval "echo \"\$$2\""); }

write_config() {
  local s first=1 id
  # the file holds both sites' admin keys: created private (umask in the subshell), never
  # readable between its creation and a chmod; a stale .tmp would keep its old mode, so it goes
  rm -f "$MIRROR_CONFIG.tmp"
  (umask 077; {
    printf '{"script": "%s/ceph-mirror.sh", "pool": "%s", "sites": [' "$HERE" "$POOL"
    for s in a b; do
      site "$s"
      id=$(c osd pool ls detail -f json | python3 -c 'import json,sys; print([p["pool_id"] for p in json.load(sys.stdin) if p["pool_name"] == sys.argv[1]][0])' "$POOL")
      ((first)) || printf ', '
      first=0
      printf '{"name": "%s", "clusterID": "%s", "monitors": "%s", "adminID": "admin", "adminKey": "%s", "poolID": %s, "dir": "%s"}' \
        "$s" "$MONOCEPH_CLUSTER_ID" "$(value "$CEPH_DIR/env" CEPH_MONITORS)" "$(value "$CEPH_DIR/env" CEPH_ADMIN_KEY)" "$id" "$CEPH_DIR"
    done
    printf ']}\n'
  } >"$MIRROR_CONFIG.tmp")
  mv "$MIRROR_CONFIG.tmp" "$MIRROR_CONFIG"
}

cmd_start() {
  command -v rbd-mirror >/dev/null || die "missing rbd-mirror: run scripts/install-deps.sh"
  cmd_stop >/dev/null 2>&1 || true
  local s token out
  for s in a b; do
    site "$s"
    "$HERE/ceph-local.sh" start --fresh >/dev/null
    # image mode: only the images EnableVolumeReplication enables are mirrored
    if [[ $s == b ]]; then
      # the same pool name under another pool ID on B, as on real sites: the IDs volume IDs
      # carry must be mapped (see the cluster map's mirrorPeers)
      out=$(c osd pool rm "$POOL" "$POOL" --yes-i-really-really-mean-it 2>&1) || die "site $s: osd pool rm $POOL: $out"
      out=$(c osd pool create "$POOL" 8 8 2>&1) || die "site $s: osd pool create $POOL: $out"
      r pool init "$POOL"
    fi
    r mirror pool enable --site-name "site-$s" "$POOL" image
  done
  site a
  token=$(r mirror pool peer bootstrap create --site-name site-a "$POOL")
  site b
  r mirror pool peer bootstrap import --site-name site-b --direction rx-tx "$POOL" - <<<"$token"
  for s in a b; do
    site "$s"
    start_mirror
  done
  write_config
  log "sites a ($A_DIR) and b ($B_DIR) mirror pool $POOL; config $MIRROR_CONFIG"
  cmd_env
}

cmd_stop() {
  local s
  for s in a b; do
    site "$s"
    stop_mirror
    "$HERE/ceph-local.sh" stop --purge --kill >/dev/null 2>&1 || true
  done
  rm -f "$MIRROR_CONFIG"
  log "stopped"
}

cmd_env() {
  [[ -f $MIRROR_CONFIG ]] || die "no mirror pair running (run: $0 start)"
  echo "export MONOCEPH_MIRROR_CONFIG=$MIRROR_CONFIG"
}

case ${1:-} in
start) cmd_start ;;
stop) cmd_stop ;;
stop-site)
  site "${2:-}"
  stop_mirror
  "$HERE/ceph-local.sh" stop >/dev/null
  ;;
start-site)
  site "${2:-}"
  "$HERE/ceph-local.sh" start >/dev/null
  start_mirror
  ;;
env) cmd_env ;;
*) echo "usage: $0 start | stop | stop-site a|b | start-site a|b | env" >&2; exit 2 ;;
esac

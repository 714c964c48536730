#!/usr/bin/env bash
# ceph-local.sh - a throwaway single-node Ceph cluster on 127.0.0.1 for development and tests.
#
#   start [--fresh]  boot (or restart, or leave running) mon a, mgr x, one OSD (BlueStore on a
#                    sparse file; CEPH_OBJECTSTORE=memstore opts into memstore), MDS a, CephFS
#                    "$CEPH_FS_NAME" and RBD pool "$CEPH_RBD_POOL".
#                    Idempotent; restarts only the daemons that are not running. Never deletes a
#                    cluster unless --fresh says so: a cluster that cannot come back (a memstore OSD
#                    that ended without `stop` lost its objects) is an error naming --fresh. Prints `export` lines for the environment tests and the driver read,
#                    also kept in $CEPH_DIR/env, and writes a monoceph cluster map to $CEPH_DIR/clusters.json.
#   stop [--purge] [--kill]
#                    stop the daemons recorded in $CEPH_DIR/run (and only those); --purge deletes $CEPH_DIR.
#   status           exit 0 and print `ceph -s` when the cluster answers, exit 1 otherwise.
#   guard CMD...     run CMD (a test tier) while watching the daemons: one that dies is named at
#                    once with its last log lines and crash dump, and CMD is ended (see cmd_guard).
#   env              print the export lines of a running cluster.
#
# All state lives in $CEPH_DIR (default ${TMPDIR:-/tmp}/monoceph-ceph, and monoceph-ceph-<release>
# for other releases than pacific). Needs scripts/install-deps.sh.
#
# CEPH_RELEASE=pacific|reef|tentacle (default pacific, the host's own Ceph on Debian 12) picks
# the release of the daemons. Reef and Tentacle run chrooted in their Debian root filesystem
# (scripts/ceph-root.sh: the first start builds it, one to two minutes), on the same ports and
# with the same layout. A cluster keeps its release: starting it as another is an error naming
# --fresh. Inside another release's root filesystem (a client of another release, e.g. the
# image's Reef libraries against a Pacific cluster), a cluster can be used but not started.
set -euo pipefail

RELEASE=${CEPH_RELEASE:-pacific}
# a cluster keeps its release: each release has a default directory of its own
CEPH_DIR=${CEPH_DIR:-${TMPDIR:-/tmp}/monoceph-ceph$([[ $RELEASE == pacific ]] || echo "-$RELEASE")}
CEPH_DIR=$(realpath -m "$CEPH_DIR") # daemons chdir("/") when they daemonize: paths must be absolute
MON_V2_PORT=${CEPH_MON_V2_PORT:-3300}
MON_V1_PORT=${CEPH_MON_V1_PORT:-6789}
BIND_PORT_MIN=${CEPH_BIND_PORT_MIN:-6800}
BIND_PORT_MAX=${CEPH_BIND_PORT_MAX:-7300}
# BlueStore by default: Pacific 16.2.15's memstore OSD segfaults in snapshot trimming under the
# suites' snapshot load (MemStore::OmapIteratorImpl::value under
# SnapMapper::get_next_objects_to_trim), and a killed BlueStore OSD comes back with its data.
# A cluster keeps the object store it was made with (its ceph.conf's `osd objectstore`).
OBJECTSTORE=${CEPH_OBJECTSTORE:-bluestore}
MEMSTORE_BYTES=${CEPH_MEMSTORE_BYTES:-$((4 << 30))}   # reported size; RAM is used only as data is written
BLUESTORE_BYTES=${CEPH_BLUESTORE_BYTES:-$((10 << 30))} # sparse block file
FS_NAME=${CEPH_FS_NAME:-myfs}
RBD_POOL=${CEPH_RBD_POOL:-rbd}
CLUSTER_ID=${MONOCEPH_CLUSTER_ID:-local}
TIMEOUT=${CEPH_START_TIMEOUT:-180}
CONF=$CEPH_DIR/ceph.conf
KEYRING=$CEPH_DIR/keyring
RUN=$CEPH_DIR/run
DAEMONS=(mon.a mgr.x osd.0 mds.a)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
T0=$EPOCHREALTIME

# Daemons and tools run with a clean environment: what the caller exported must not reach them.
# The env file this script writes exports CEPH_ARGS="--conf … --keyring … --id admin"; a daemon
# restarted under it runs as client.admin and fails ("failed to fetch mon config").
# They run from /, as systemd starts them: Debian's Reef and Tentacle OSDs look for their object
# classes in the relative directory lib/<arch>/rados-classes (osd_class_dir), and without them
# RBD and the manager's SQLite answer EOPNOTSUPP.
clean() { env -i -C / PATH="$PATH" HOME="${HOME:-/root}" LANG=C.UTF-8 "$@"; }

log() { printf '[ceph-local %6.1fs] %s\n' "$(awk "BEGIN{print $EPOCHREALTIME - $T0}")" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
c() { clean timeout 60 ceph -c "$CONF" --connect-timeout 15 "$@"; }

# A pid file counts only while its process runs and is not a zombie (daemons are reparented to PID 1).
alive() { local s; s=$(awk '/^State:/{print $2}' "/proc/$1/status" 2>/dev/null) && [[ -n $s && $s != Z ]]; }
pid_alive() { [[ -f $1 ]] && alive "$(cat "$1")"; }
all_alive() { local d; for d in "${DAEMONS[@]}"; do pid_alive "$RUN/$d.pid" || return 1; done; }

wait_for() { # wait_for <what> <command...>
  local what=$1 deadline=$((SECONDS + TIMEOUT)); shift
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "timed out after ${TIMEOUT}s waiting for $what (logs in $CEPH_DIR/log)"
    respawn
    sleep 0.5
  done
  log "$what: ok"
}

# respawn starts again a manager or MDS that died after it was started, as systemd's Restart=
# does on a real host: both keep their state in RADOS. Reef's ceph-mgr on Debian 13 (Python 3.13)
# now and then segfaults in PyThreadState_Swap as a volumes command completes (seen once in a CI
# run: the bootstrap then waited for an active MDS that only the manager reports). The OSD is not
# respawned: a memstore OSD that died lost its objects.
respawn() {
  if ((${MGR_STARTED:-0})) && ! running ceph-mgr; then
    log "ceph-mgr died (see $CEPH_DIR/log/mgr.x.log), starting it again"
    start_mgr
  fi
  if ((${MDS_STARTED:-0})) && ! running ceph-mds; then
    log "ceph-mds died (see $CEPH_DIR/log/mds.a.log), starting it again"
    start_mds
  fi
}

# running <binary>: a process of ours (this cluster's ceph.conf) runs it. Not the pid files: a
# daemon that crashes removes its own.
running() {
  local p
  for p in /proc/[0-9]*; do ours "${p#/proc/}" "$1" && return 0; done
  return 1
}

start_mds() {
  MDS_STARTED=1
  clean ceph-mds -c "$CONF" -i a 2>/dev/null
}
osd_up() { c osd stat -f json | grep -q '"num_up_osds":1'; }
mgr_avail() { c mgr stat -f json | grep -q '"available": *true'; }
mds_active() { c fs status "$FS_NAME" -f json | grep -q '"state": *"active"'; }
pgs_clean() { c pg stat | grep -Eq '^[0-9]+ pgs: [0-9]+ active\+clean;'; }
vol_create() { c fs volume create "$FS_NAME"; }

write_env() {
  local key mons=127.0.0.1:$MON_V1_PORT
  # librados takes a bare host:port on any port but 6789 for a msgr2 address: on other ports
  # the legacy protocol must be named (and over msgr2 a wrong key shows as a connect timeout,
  # not as EACCES)
  [[ $MON_V1_PORT == 6789 ]] || mons=v1:$mons
  key=$(clean ceph-authtool -p -n client.admin "$KEYRING")
  cat >"$CEPH_DIR/env" <<ENV
export CEPH_DIR=$CEPH_DIR
export CEPH_RELEASE=$RELEASE
export CEPH_CONF=$CONF
export CEPH_KEYRING=$KEYRING
export CEPH_ARGS="--conf $CONF --keyring $KEYRING --id admin"
export CEPH_MONITORS=$mons
export CEPH_ADMIN_ID=admin
export CEPH_ADMIN_KEY=$key
export CEPH_FS_NAME=$FS_NAME
export CEPH_RBD_POOL=$RBD_POOL
export MONOCEPH_CLUSTER_ID=$CLUSTER_ID
export MONOCEPH_CLUSTER_CONFIG=$CEPH_DIR/clusters.json
ENV
  chmod 600 "$CEPH_DIR/env"
  cat >"$CEPH_DIR/clusters.json" <<JSON
[
  {
    "clusterID": "$CLUSTER_ID",
    "monitors": ["$mons"],
    "cephFS": {"subvolumeGroup": "csi"},
    "rbd": {"radosNamespace": ""}
  }
]
JSON
}

finish() {
  write_env
  touch "$CEPH_DIR/.ready"
  log "$1"
  cat "$CEPH_DIR/env"
  exit 0
}

# Debian 13's ceph-mgr 18.2.7 (Reef) imports bcrypt in mgr_util.py, which every manager module
# loads in a Python sub-interpreter, where Debian's python3-bcrypt (Rust, PyO3) refuses to load:
# every module fails, volumes included. When that is the case here, the manager gets a stand-in
# bcrypt module whose functions raise (only the dashboard hashes passwords).
start_mgr() {
  MGR_STARTED=1
  local path=$CEPH_DIR/mgr-python
  # Python 3.13's _interpreters runs the import in a sub-interpreter, as ceph-mgr does
  if grep -qs '^import bcrypt' /usr/share/ceph/mgr/mgr_util.py && ! clean /usr/bin/python3 -c '
try:
    import _interpreters as i
except ImportError:
    raise SystemExit(0)  # an older Python: no sub-interpreter to try the import in
raise SystemExit(i.exec(i.create(), "import bcrypt") is not None)' 2>/dev/null; then
    mkdir -p "$path/bcrypt"
    cat >"$path/bcrypt/__init__.py" <<'PY'
"""bcrypt stand-in for ceph-mgr, written by monoceph's scripts/ceph-local.sh: the real module
cannot load in the manager's sub-interpreters here."""


def _unavailable(*args, **kwargs):
    raise RuntimeError("bcrypt cannot load in ceph-mgr's Python sub-interpreters on this system")


gensalt = hashpw = checkpw = kdf = _unavailable
PY
    log "ceph-mgr: python3-bcrypt cannot load in sub-interpreters, using a stand-in ($path)"
    clean PYTHONPATH="$path" ceph-mgr -c "$CONF" -i x
  else
    clean ceph-mgr -c "$CONF" -i x
  fi
}

start_daemons() {
  pid_alive "$RUN/mon.a.pid" || clean ceph-mon -c "$CONF" -i a
  wait_for "mon up" c mon stat
  pid_alive "$RUN/mgr.x.pid" || start_mgr
  rm -f "$CEPH_DIR/.osd-saved"
  pid_alive "$RUN/osd.0.pid" || clean ceph-osd -c "$CONF" -i 0
  pid_alive "$RUN/mds.a.pid" || start_mds
}

write_conf() {
  cat >"$CONF" <<CONF
[global]
fsid = $1
mon host = [v2:127.0.0.1:$MON_V2_PORT,v1:127.0.0.1:$MON_V1_PORT]
public addr = 127.0.0.1
public network = 127.0.0.0/8
ms bind ipv4 = true
ms bind ipv6 = false
ms bind port min = $BIND_PORT_MIN
ms bind port max = $BIND_PORT_MAX
ms async op threads = 2
keyring = $KEYRING
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
auth allow insecure global id reclaim = false
run dir = $RUN
crash dir = $CEPH_DIR/crash
log file = $CEPH_DIR/log/\$name.log
pid file = $RUN/\$name.pid
admin socket = $RUN/\$name.asok
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon max pg per osd = 1000
# the host disk may be less than 30 % free; the cluster must stay HEALTH_OK anyway
mon data avail warn = 1
mon data avail crit = 0
mon osd full ratio = .99
mon osd nearfull ratio = .99
mon osd backfillfull ratio = .99
osd failsafe full ratio = .99
rbd default features = layering,exclusive-lock,object-map,fast-diff,deep-flatten

[client]
# many clients (ceph CLI, ceph-fuse, rbd-fuse, tests) run at once: a shared pid file or admin
# socket makes the second ceph-fuse fail with (33) Numerical argument out of domain
pid file =
admin socket = $RUN/\$name.\$pid.\$cctid.asok

[mon]
log to stderr = false
err to stderr = false
mon data = $CEPH_DIR/mon/\$id
mon cluster log file = $CEPH_DIR/log/cluster.log
mon pg warn min per osd = 0
# no restful module (nothing here uses it; on Debian 13's Reef it fails to load, as bcrypt does)
mgr initial modules = iostat nfs

[mgr]
log to stderr = false
err to stderr = false
mgr data = $CEPH_DIR/mgr/\$id
keyring = $CEPH_DIR/mgr/\$id/keyring

[osd]
log to stderr = false
err to stderr = false
osd data = $CEPH_DIR/osd/\$id
keyring = $CEPH_DIR/osd/\$id/keyring
osd objectstore = $OBJECTSTORE
memstore device bytes = $MEMSTORE_BYTES
# memstore saves its data only when the store is unmounted cleanly
osd fast shutdown = false
bluestore block create = true
bluestore block size = $BLUESTORE_BYTES
bluestore fsck on mount = false
osd op num shards = 1
osd op num threads per shard = 2
osd memory target = 1073741824
# memstore counts as hdd: the default 5 s sleep per snapshot-trim step lets removed snapshots'
# data pile up in RAM while tests create and delete hundreds of them
osd snap trim sleep hdd = 0

[mds]
log to stderr = false
err to stderr = false
mds data = $CEPH_DIR/mds/\$id
keyring = $CEPH_DIR/mds/\$id/keyring
mds cache memory limit = 268435456
CONF
}

bootstrap() {
  local fsid osd_uuid osd_id p bin check
  for bin in ceph ceph-mon ceph-mgr ceph-osd ceph-mds ceph-authtool monmaptool rbd ss; do
    command -v "$bin" >/dev/null || die "missing $bin: run scripts/install-deps.sh"
  done
  for p in "$MON_V2_PORT" "$MON_V1_PORT"; do
    if ss -Hltn "sport = :$p" | grep -q .; then die "TCP port $p already in use (set CEPH_MON_V2_PORT/CEPH_MON_V1_PORT)"; fi
  done
  mkdir -p "$CEPH_DIR"/{mon/a,mgr/x,osd/0,mds/a,log,run,crash}
  echo "$RELEASE" >"$CEPH_DIR/release"
  fsid=$(cat /proc/sys/kernel/random/uuid)
  write_conf "$fsid"

  # Tentacle's tools (20.2.4, CVE-2025-30156) make aes256k keys and monmaps that accept nothing
  # else, but Pacific and Reef clients know only aes keys. Where the tools know key types, the
  # monmap allows both and client.admin gets an aes key, so that clients of every release (the
  # host's Pacific tools, the image's Reef libraries) can use the cluster; daemons keep aes256k.
  local legacy=() ciphers=()
  if grep -q -- --auth-allowed-ciphers < <(clean monmaptool --help 2>&1); then
    ciphers=(--auth-allowed-ciphers aes,aes256k)
    legacy=(--key-type aes)
  fi
  clean ceph-authtool --create-keyring "$CEPH_DIR/mon.keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
  clean ceph-authtool --create-keyring "$KEYRING" --gen-key "${legacy[@]}" -n client.admin \
    --cap mon 'allow *' --cap osd 'allow *' --cap mds 'allow *' --cap mgr 'allow *' >/dev/null
  clean ceph-authtool "$CEPH_DIR/mon.keyring" --import-keyring "$KEYRING" >/dev/null
  chmod 600 "$CEPH_DIR/mon.keyring" "$KEYRING"

  clean monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$MON_V2_PORT,v1:127.0.0.1:$MON_V1_PORT]" \
    "${ciphers[@]}" "$CEPH_DIR/monmap" >/dev/null
  clean ceph-mon -c "$CONF" --mkfs -i a --monmap "$CEPH_DIR/monmap" --keyring "$CEPH_DIR/mon.keyring"
  clean ceph-mon -c "$CONF" -i a
  wait_for "mon up" c mon stat

  c auth get-or-create mgr.x mon 'allow profile mgr' osd 'allow *' mds 'allow *' -o "$CEPH_DIR/mgr/x/keyring"
  start_mgr

  osd_uuid=$(cat /proc/sys/kernel/random/uuid)
  osd_id=$(c osd new "$osd_uuid")
  [[ $osd_id == 0 ]] || die "unexpected osd id '$osd_id'"
  c auth get-or-create osd.0 mon 'allow profile osd' mgr 'allow profile osd' osd 'allow *' -o "$CEPH_DIR/osd/0/keyring"
  clean ceph-osd -c "$CONF" -i 0 --mkfs --osd-uuid "$osd_uuid" >"$CEPH_DIR/log/osd.0.mkfs.log" 2>&1 ||
    { cat "$CEPH_DIR/log/osd.0.mkfs.log" >&2; die "ceph-osd --mkfs failed"; }
  clean ceph-osd -c "$CONF" -i 0

  c auth get-or-create mds.a mon 'allow profile mds' osd 'allow rw tag cephfs *=*' mds 'allow' mgr 'allow profile mds' \
    -o "$CEPH_DIR/mds/a/keyring"
  start_mds

  wait_for "osd.0 up" osd_up
  wait_for "mgr available" mgr_avail
  c config set mgr mgr/devicehealth/enable_monitoring false >/dev/null || true
  # the aes keys above are deliberate (see the monmap): their health warnings are expected
  if ((${#ciphers[@]})); then
    for check in AUTH_INSECURE_CLIENT_KEY_TYPE AUTH_INSECURE_KEYS_ALLOWED AUTH_INSECURE_KEYS_CREATABLE; do
      c health mute "$check" --sticky >/dev/null
    done
  fi
  # clone v2 (clones of unprotected snapshots, snapshot trash) needs mimic or newer clients
  c osd set-require-min-compat-client mimic >/dev/null 2>&1

  c osd pool create "$RBD_POOL" 8 8 >/dev/null 2>&1
  clean timeout 60 rbd -c "$CONF" pool init "$RBD_POOL"
  wait_for "fs volume create $FS_NAME" vol_create
  # tests SIGKILL FUSE clients on purpose; their stale sessions would hold capabilities (and
  # block the volumes module) for the default 300 s
  c fs set "$FS_NAME" session_timeout 30 >/dev/null
  c fs set "$FS_NAME" session_autoclose 35 >/dev/null
  wait_for "mds active" mds_active
  wait_for "all pgs active+clean" pgs_clean
  touch "$CEPH_DIR/.bootstrapped"
  finish "cluster ready (fsid $fsid) in $CEPH_DIR"
}

cmd_start() {
  local fresh=${CEPH_FRESH:-0} have
  [[ ${1:-} == --fresh ]] && fresh=1
  if ((fresh)); then
    [[ $CLIENT == "$RELEASE" ]] || die "cannot make a $RELEASE cluster with Ceph $CLIENT's daemons: start it outside the $CLIENT root filesystem"
    if [[ -e $CEPH_DIR ]]; then
      log "--fresh: stopping and deleting the cluster in $CEPH_DIR"
      cmd_stop >/dev/null 2>&1 || true
      rm -rf "$CEPH_DIR"
    fi
    bootstrap
  fi
  if [[ -f $CEPH_DIR/.bootstrapped ]]; then
    have=$(cat "$CEPH_DIR/release" 2>/dev/null || echo pacific) # clusters made before releases were recorded
    [[ $have == "$RELEASE" ]] ||
      die "the cluster in $CEPH_DIR runs Ceph $have, not $RELEASE (CEPH_RELEASE): use another CEPH_DIR, or \`CEPH_RELEASE=$RELEASE $0 start --fresh\` to replace it"
  fi
  if [[ -f $CEPH_DIR/.ready ]] && all_alive && c -s >/dev/null 2>&1; then
    finish "cluster in $CEPH_DIR already running"
  fi
  [[ $CLIENT == "$RELEASE" ]] ||
    die "no $RELEASE cluster running in $CEPH_DIR, and Ceph $CLIENT's daemons here cannot start one: run \`CEPH_RELEASE=$RELEASE $0 start\` outside the $CLIENT root filesystem first"
  if [[ -f $CEPH_DIR/.bootstrapped ]]; then
    # A cluster's data is deleted only when asked for (--fresh): not when a restart fails, and
    # not when a memstore OSD lost its objects by ending without `stop`.
    OBJECTSTORE=$(objectstore_of_cluster)
    if [[ $OBJECTSTORE == memstore && ! -f $CEPH_DIR/.osd-saved ]] && ! pid_alive "$RUN/osd.0.pid"; then
      die "the memstore OSD in $CEPH_DIR ended without \`$0 stop\` (killed, or the machine restarted), so its objects are lost; \`$0 start --fresh\` deletes this cluster and makes a new one"
    fi
    log "restarting the cluster in $CEPH_DIR"
    # the daemons' own processes, not only the maps: a killed OSD still counts as up in the
    # osdmap until the monitor notices
    if (start_daemons && wait_for "daemons running" all_alive && wait_for "osd.0 up" osd_up && wait_for "mgr available" mgr_avail &&
      wait_for "mds active" mds_active && wait_for "all pgs active+clean" pgs_clean); then
      finish "cluster restarted in $CEPH_DIR"
    fi
    die "the cluster in $CEPH_DIR did not come back (logs in $CEPH_DIR/log); \`$0 start --fresh\` deletes it and makes a new one"
  fi
  if [[ -e $CEPH_DIR ]]; then
    # a bootstrap that never finished: there is no cluster to keep
    log "removing the unfinished bootstrap in $CEPH_DIR"
    cmd_stop >/dev/null 2>&1 || true
    rm -rf "$CEPH_DIR"
  fi
  bootstrap
}

# the object store the cluster was made with (its ceph.conf), whatever CEPH_OBJECTSTORE says now
objectstore_of_cluster() { awk '$1 == "osd" && $2 == "objectstore" {print $4}' "$CONF"; }

# cmd_guard CMD...: runs CMD, a test tier against this cluster, and watches the daemons while it
# runs. Without it a daemon that dies mid-run (Pacific's memstore OSD segfaulting in snapshot
# trimming, 31 minutes into `make test`) shows only as every test still running failing, one by
# one, on a Ceph timeout (ret=-110) that names nothing. A monitor or OSD that dies ends CMD at once
# (its tests can only time out) after naming the daemon, its last log lines and Ceph's crash dump;
# `start` brings a BlueStore OSD back for the next tier. A manager or MDS that dies is named too
# and started again, as systemd's Restart= would: both keep their state in RADOS, and the tests
# in flight see a pause. CMD runs in a process group of its own so that all of it is ended.
# Exit status: CMD's, or 75 when a daemon's death ended it.
cmd_guard() {
  (($#)) || die "usage: $0 guard CMD..."
  [[ -f $CEPH_DIR/.ready ]] || die "guard: no cluster running in $CEPH_DIR (run: $0 start)"
  local d pid child i rc=0 started=$SECONDS tier="$*"
  GUARD_START=$(date +%s)
  local -A pids=() logged=()
  for d in "${DAEMONS[@]}"; do
    pid_alive "$RUN/$d.pid" || die "guard: $d of the cluster in $CEPH_DIR is not running (run: $0 start)"
    pids[$d]=$(cat "$RUN/$d.pid")
    logged[$d]=$(log_size "$d") # what the report leaves out
  done
  set -m # CMD's own process group
  "$@" &
  child=$!
  set +m
  trap 'kill -TERM -- -$child 2>/dev/null' INT TERM
  while alive "$child"; do
    for d in "${DAEMONS[@]}"; do
      alive "${pids[$d]}" && continue
      report_death "$d" "${pids[$d]}" $((SECONDS - started)) "$tier" "${logged[$d]}"
      logged[$d]=$(log_size "$d")
      case $d in
      mgr.*) start_mgr; pids[$d]=$(wait_pid "$d") ;;
      mds.*) start_mds; pids[$d]=$(wait_pid "$d") ;;
      *)
        log "guard: ending the tier (${tier:0:160}): its tests need $d"
        kill -TERM -- "-$child" 2>/dev/null || true
        for ((i = 0; i < 100; i++)); do alive "$child" || break; sleep 0.1; done
        kill -KILL -- "-$child" 2>/dev/null || true
        wait "$child" 2>/dev/null || true
        return 75
        ;;
      esac
    done
    sleep 1
  done
  wait "$child" || rc=$?
  return "$rc"
}

# log_size <daemon>: how much of the daemon's log was written so far
log_size() { stat -c %s "$CEPH_DIR/log/$1.log" 2>/dev/null || echo 0; }

# wait_pid <daemon>: the pid of a daemon just started (its pid file appears once it daemonized)
wait_pid() {
  local i
  for ((i = 0; i < 100; i++)); do
    pid_alive "$RUN/$1.pid" && { cat "$RUN/$1.pid"; return; }
    sleep 0.1
  done
  echo 0 # not back: the next round reports it again
}

# report_death <daemon> <pid> <seconds> <command> <log offset>: what a developer or CI reader
# needs to see first, from the daemon's log past the offset (earlier crashes are not this one);
# kept in $CEPH_DIR/deaths too (a tier's output may be cut).
report_death() {
  local d=$1 logf=$CEPH_DIR/log/$1.log crash since
  # Ceph's crash handler writes <crash dir>/<timestamp>_<uuid>/{meta,log} on a fatal signal
  # (not on SIGKILL): one written since the guard started whose meta names this daemon
  crash=$(find "$CEPH_DIR/crash" -mindepth 2 -maxdepth 2 -name meta -newermt "@$GUARD_START" \
    -exec grep -l "\"entity_name\": \"$d\"" {} + 2>/dev/null || true)
  crash=${crash%%$'\n'*}
  {
    echo "::: CEPH DAEMON DIED: $d (pid $2) of the cluster in $CEPH_DIR, $3 s into: ${4:0:160}"
    if [[ -n $crash ]]; then
      echo "::: crash dump: $(dirname "$crash")"
    else
      echo "::: crash dump: none in $CEPH_DIR/crash (killed by a signal Ceph cannot catch, or it exited)"
    fi
    echo "::: last lines of $logf:"
    # the crash handler's banner and backtrace where there is one (the dump of recent events
    # that follows is thousands of lines), else the end of the log. awk, not a pipe into head:
    # under pipefail a writer cut off by head fails the report.
    since=$(tail -c +$(($5 + 1)) "$logf" 2>/dev/null || true)
    if [[ $since == *"Caught signal"* ]]; then
      awk '/Caught signal/ {p = 1} p && n++ < 40 {print} p && /NOTE: a copy of the executable/ {exit}' <<<"$since"
    else
      awk '{l[NR % 25] = $0} END {for (i = NR - 24; i <= NR; i++) if (i > 0) print l[i % 25]}' <<<"$since"
    fi
  } | tee -a "$CEPH_DIR/deaths" >&2
}

# ours <pid> <binary>: guards against PID reuse; only our daemons started with our ceph.conf are signalled.
ours() {
  local cmd
  cmd=$(tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline") || return 1
  [[ $cmd == *"$2 "* && $cmd == *"$CONF"* ]]
}

stop_group() { # stop_group <signal> <grace seconds> <daemon>...; sets ENDED to those that exited on <signal>
  local sig=$1 grace=$2 d pid i pids=() names=() n; shift 2
  ENDED=()
  for d in "$@"; do
    [[ -f $RUN/$d.pid ]] || continue
    pid=$(cat "$RUN/$d.pid")
    if [[ $pid =~ ^[0-9]+$ ]] && ours "$pid" "ceph-${d%%.*}"; then
      kill -"$sig" "$pid" 2>/dev/null && pids+=("$pid") && names+=("$d")
    fi
    rm -f "$RUN/$d.pid"
  done
  for n in "${!pids[@]}"; do
    pid=${pids[n]}
    for ((i = 0; i < grace * 10; i++)); do alive "$pid" || break; sleep 0.1; done
    if alive "$pid"; then
      log "pid $pid still running after SIG$sig, sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      for ((i = 0; i < 50; i++)); do alive "$pid" || break; sleep 0.1; done
    else
      ENDED+=("${names[n]}")
    fi
  done
}

cmd_stop() {
  local purge=0 sig=TERM a
  for a in "$@"; do
    case $a in
    --purge) purge=1 ;;
    --kill) sig=KILL ;;
    *) die "usage: $0 stop [--purge] [--kill]" ;;
    esac
  done
  if [[ -d $CEPH_DIR ]]; then
    # The MDS first: its clean shutdown needs the OSD and the mon. Its journal lives in RADOS, so a
    # SIGKILL after a short grace is safe. The OSD must stop cleanly or memstore loses its data.
    stop_group "$sig" 10 mds.a
    stop_group "$sig" 15 osd.0 mgr.x
    # a memstore OSD saved its data only if it ended on SIGTERM; a restart needs that data
    if [[ $sig == TERM && " ${ENDED[*]} " == *" osd.0 "* ]]; then touch "$CEPH_DIR/.osd-saved"; fi
    stop_group "$sig" 15 mon.a
    rm -f "$CEPH_DIR/.ready"
  fi
  if ((purge)); then rm -rf "$CEPH_DIR"; fi
  log "stopped"
}

cmd_status() {
  if [[ -f $CEPH_DIR/.ready ]] && all_alive && c -s; then
    exit 0
  fi
  echo "ceph-local: no cluster running in $CEPH_DIR" >&2
  exit 1
}

cmd_env() {
  [[ -f $CEPH_DIR/.ready && -f $CEPH_DIR/env ]] || die "no cluster running in $CEPH_DIR (run: $0 start)"
  cat "$CEPH_DIR/env"
}

case $RELEASE in pacific | reef | tentacle) ;; *) die "CEPH_RELEASE=$RELEASE: not pacific, reef or tentacle" ;; esac
CLIENT=${MONOCEPH_ROOT:-pacific} # the release of the Ceph binaries here
# daemons of another release than the host's start in that release's root filesystem
if [[ ${1:-} == start && -z ${MONOCEPH_ROOT:-} && $RELEASE != pacific ]]; then
  exec "$HERE/ceph-root.sh" run "$RELEASE" "$0" "$@"
fi

case ${1:-} in
start) shift; cmd_start "$@" ;;
stop) shift; cmd_stop "$@" ;;
status) cmd_status ;;
guard) shift; cmd_guard "$@" ;;
env) cmd_env ;;
*) echo "usage: $0 start [--fresh] | stop [--purge] [--kill] | status | env | guard CMD..." >&2; exit 2 ;;
esac

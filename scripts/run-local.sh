#!/usr/bin/env bash
# run-local.sh - run monoceph in all-in-one mode against the local Ceph cluster and show it
# answering. The driver keeps running in the background; `scripts/run-local.sh stop` (or
# `make stop`) sends it SIGTERM.
#
#   MONOCEPH_TYPE     rbd (default) or cephfs
#   MONOCEPH_RUN_DIR  where the socket, log and pid file go (default ${TMPDIR:-/tmp}/monoceph-run)
#   METRICS_ADDRESS   /metrics and /healthz (default 127.0.0.1:9808)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

TYPE=${MONOCEPH_TYPE:-rbd}
RUN_DIR=${MONOCEPH_RUN_DIR:-${TMPDIR:-/tmp}/monoceph-run}
METRICS=${METRICS_ADDRESS:-127.0.0.1:9808}
SOCK=$RUN_DIR/$TYPE/csi.sock
PIDFILE=$RUN_DIR/$TYPE/monoceph.pid
LOG=$RUN_DIR/$TYPE/monoceph.log

stop() {
  if [[ -f $PIDFILE ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    kill -TERM "$(cat "$PIDFILE")"
    for _ in $(seq 50); do kill -0 "$(cat "$PIDFILE")" 2>/dev/null || break; sleep 0.1; done
    echo "monoceph stopped"
  fi
  rm -f "$PIDFILE"
}
if [[ ${1:-} == stop ]]; then stop; exit 0; fi

scripts/ceph-local.sh start >/dev/null
eval "$(scripts/ceph-local.sh env)"
[[ -x bin/monoceph && -x bin/grpcurl ]] || make build bin/grpcurl
stop
mkdir -p "$RUN_DIR/$TYPE"

bin/monoceph --type="$TYPE" --mode=all --endpoint="unix://$SOCK" --nodeid="$(hostname)" \
  --cluster-config="$MONOCEPH_CLUSTER_CONFIG" --metrics-address="$METRICS" -v=2 >"$LOG" 2>&1 &
echo $! >"$PIDFILE"

PROTO_DIR=$(go env GOMODCACHE)/github.com/container-storage-interface/spec@v1.13.0
# csi [-d BODY] METHOD: grpcurl wants its options before the address
csi() {
  local opts=()
  while [[ $1 == -* ]]; do opts+=("$1" "$2"); shift 2; done
  bin/grpcurl -plaintext -max-time 30 -import-path "$PROTO_DIR" -proto csi.proto "${opts[@]}" "unix://$SOCK" "$@"
}
for _ in $(seq 100); do csi csi.v1.Identity/Probe >/dev/null 2>&1 && break; sleep 0.1; done

echo "== monoceph $TYPE driver, pid $(cat "$PIDFILE"), log $LOG"
echo "== Identity/GetPluginInfo";         csi csi.v1.Identity/GetPluginInfo
echo "== Identity/GetPluginCapabilities"; csi csi.v1.Identity/GetPluginCapabilities
echo "== Identity/Probe";                 csi csi.v1.Identity/Probe
echo "== GET http://$METRICS/healthz";    curl -sS "http://$METRICS/healthz"
echo "== cluster map $MONOCEPH_CLUSTER_CONFIG"; cat "$MONOCEPH_CLUSTER_CONFIG"

# A volume's life through the controller: the key goes on stdin, never on a command line.
secrets="\"secrets\":{\"userID\":\"$CEPH_ADMIN_ID\",\"userKey\":\"$CEPH_ADMIN_KEY\"}"
call() { local method=$1 body=$2; csi -d @ "$method" <<<"{$body,$secrets}"; }
mount='"volumeCapabilities":[{"mount":{},"accessMode":{"mode":"SINGLE_NODE_WRITER"}}]'
if [[ $TYPE == rbd ]]; then
  params="\"parameters\":{\"clusterID\":\"$MONOCEPH_CLUSTER_ID\",\"pool\":\"$CEPH_RBD_POOL\",\"mounter\":\"fuse\"}"
  list_storage() { rbd -c "$CEPH_CONF" ls "$CEPH_RBD_POOL"; }
else
  params="\"parameters\":{\"clusterID\":\"$MONOCEPH_CLUSTER_ID\",\"fsName\":\"$CEPH_FS_NAME\",\"mounter\":\"fuse\"}"
  list_storage() { ceph -c "$CEPH_CONF" fs subvolume ls "$CEPH_FS_NAME" --group_name csi; }
fi
echo "== Controller/CreateVolume demo-volume (64 MiB)"
vol=$(call csi.v1.Controller/CreateVolume "\"name\":\"demo-volume\",\"capacityRange\":{\"requiredBytes\":67108864},$mount,$params")
echo "$vol"
volid=$(sed -n 's/.*"volumeId": "\([^"]*\)".*/\1/p' <<<"$vol")
echo "== in Ceph:"; list_storage
echo "== Controller/CreateSnapshot demo-snapshot"
snap=$(call csi.v1.Controller/CreateSnapshot "\"name\":\"demo-snapshot\",\"sourceVolumeId\":\"$volid\"")
echo "$snap"
snapid=$(sed -n 's/.*"snapshotId": "\([^"]*\)".*/\1/p' <<<"$snap")
echo "== Controller/ListSnapshots of the volume"; call csi.v1.Controller/ListSnapshots "\"sourceVolumeId\":\"$volid\""
echo "== Controller/DeleteSnapshot, Controller/DeleteVolume"
call csi.v1.Controller/DeleteSnapshot "\"snapshotId\":\"$snapid\"" >/dev/null
call csi.v1.Controller/DeleteVolume "\"volumeId\":\"$volid\"" >/dev/null
echo "== in Ceph afterwards:"; list_storage
cat <<EOT

monoceph is running in the background:
  CSI socket     unix://$SOCK
  metrics        http://$METRICS/metrics   health: http://$METRICS/healthz
  try            bin/grpcurl -plaintext -import-path $PROTO_DIR -proto csi.proto unix://$SOCK csi.v1.Identity/Probe
  Ceph env       eval "\$(scripts/ceph-local.sh env)"   (CEPH_ADMIN_KEY is the userKey secret for RPCs)
  stop           make stop; scripts/ceph-local.sh stop
EOT

{{/* Names are "<release>-<chart>" unless the release name already holds the chart name. */}}
{{- define "monoceph.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "monoceph.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Selector labels of one component: pass (dict "root" $ "component" "rbd-controller"). */}}
{{- define "monoceph.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "monoceph.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "monoceph.cephSecretName" -}}
{{- .Values.cephUser.existingSecret | default .Values.cephUser.secretName | default (printf "%s-ceph-user" (include "monoceph.fullname" .)) -}}
{{- end -}}

{{/* The node-stage secret: the node user's when one is given, else the Ceph user's. */}}
{{- define "monoceph.cephNodeSecretName" -}}
{{- $n := .Values.cephUser.node -}}
{{- if $n.existingSecret -}}{{ $n.existingSecret }}
{{- else if $n.id -}}{{ printf "%s-ceph-node-user" (include "monoceph.fullname" .) }}
{{- else -}}{{ include "monoceph.cephSecretName" . }}
{{- end -}}
{{- end -}}

{{/* The ConfigMap of the RBD KMS configuration and its key, as "name/key"; empty when
     neither rbd.kms.config nor rbd.kms.existingConfigMap is set (only the default provider). */}}
{{- define "monoceph.kmsConfigMap" -}}
{{- $k := .Values.rbd.kms -}}
{{- if and $k.config $k.existingConfigMap -}}
{{- fail "rbd.kms: set config or existingConfigMap, not both" -}}
{{- else if $k.config -}}
{{ include "monoceph.fullname" . }}-kms/config.json
{{- else if $k.existingConfigMap -}}
{{ $k.existingConfigMap }}/{{ $k.existingConfigMapKey | default "config.json" }}
{{- end -}}
{{- end -}}

{{/* The volume of the KMS configuration, its key as config.json (ConfigMap names and keys
     hold no "/"). */}}
{{- define "monoceph.kmsVolume" -}}
{{- $ref := include "monoceph.kmsConfigMap" . | splitList "/" -}}
- name: kms-config
  configMap:
    name: {{ first $ref }}
    items:
      - key: {{ last $ref }}
        path: config.json
{{- end -}}

{{- define "monoceph.clusterMapName" -}}
{{ include "monoceph.fullname" . }}-clusters
{{- end -}}

{{/* The cluster map: the "cluster" value first, then extraClusters. */}}
{{- define "monoceph.clusterMap" -}}
{{- $first := dict "clusterID" .Values.cluster.id "monitors" .Values.cluster.monitors -}}
{{- $rbd := dict -}}
{{- with .Values.cluster.rbd.radosNamespace }}{{ $_ := set $rbd "radosNamespace" . }}{{ end -}}
{{- with .Values.cluster.rbd.mirrorPeers }}{{ $_ := set $rbd "mirrorPeers" . }}{{ end -}}
{{- /* what the schema cannot say, said at install time rather than by pods that refuse the map */ -}}
{{- $ids := list .Values.cluster.id -}}
{{- range .Values.extraClusters }}{{ $ids = append $ids .clusterID }}{{ end -}}
{{- range $peer := .Values.cluster.rbd.mirrorPeers -}}
{{- if has $peer.clusterID $ids }}{{ fail (printf "cluster.rbd.mirrorPeers: %q is an entry of the cluster map too: a volume ID of it would name two clusters" $peer.clusterID) }}{{ end -}}
{{- $to := dict -}}
{{- range $from, $pool := $peer.poolIDs -}}
{{- if hasKey $to (toString $pool) }}{{ fail (printf "cluster.rbd.mirrorPeers %q: poolIDs %q and %q both map to pool %v: the mapping must be one-to-one" $peer.clusterID (get $to (toString $pool)) $from $pool) }}{{ end -}}
{{- $_ := set $to (toString $pool) $from -}}
{{- end -}}
{{- end -}}
{{- if $rbd }}{{ $_ := set $first "rbd" $rbd }}{{ end -}}
{{- $fs := dict -}}
{{- with .Values.cluster.cephFS.subvolumeGroup }}{{ $_ := set $fs "subvolumeGroup" . }}{{ end -}}
{{- with .Values.cluster.cephFS.radosNamespace }}{{ $_ := set $fs "radosNamespace" . }}{{ end -}}
{{- with .Values.cluster.cephFS.kernelMountOptions }}{{ $_ := set $fs "kernelMountOptions" . }}{{ end -}}
{{- with .Values.cluster.cephFS.fuseMountOptions }}{{ $_ := set $fs "fuseMountOptions" . }}{{ end -}}
{{- if $fs }}{{ $_ := set $first "cephFS" $fs }}{{ end -}}
{{- if .Values.cluster.readAffinity.enabled }}{{ $_ := set $first "readAffinity" (dict "enabled" true "crushLocationLabels" .Values.cluster.readAffinity.crushLocationLabels) }}{{ end -}}
{{- prepend .Values.extraClusters $first | toPrettyJson -}}
{{- end -}}

{{/* Leader election flags of the kubernetes-csi sidecars. */}}
{{- define "monoceph.leaderElectionArgs" -}}
{{- $le := .Values.controller.leaderElection -}}
- --leader-election={{ $le.enabled }}
{{- if $le.enabled }}
- --leader-election-namespace={{ .Release.Namespace }}
- --leader-election-lease-duration={{ $le.leaseDuration }}
- --leader-election-renew-deadline={{ $le.renewDeadline }}
- --leader-election-retry-period={{ $le.retryPeriod }}
{{- end }}
{{- end -}}

{{/* The enabled drivers, as a list of (dict "kind" "rbd" "values" .Values.rbd). */}}
{{- define "monoceph.drivers" -}}
{{- $out := list -}}
{{- range $kind := list "rbd" "cephfs" -}}
{{- $d := index $.Values $kind -}}
{{- if $d.enabled }}{{ $out = append $out $kind }}{{ end -}}
{{- end -}}
{{- if not $out }}{{ fail "rbd.enabled and cephfs.enabled are both false: nothing to install" }}{{ end -}}
{{- /* node plugins share the host's network, controllers may too: every listener its own port */ -}}
{{- $ports := dict -}}
{{- range $kind := $out -}}
{{- $d := index $.Values $kind -}}
{{- $mine := dict "controllerMetricsPort" $d.controllerMetricsPort "nodeMetricsPort" $d.nodeMetricsPort -}}
{{- range $sidecar, $port := $d.sidecarHealthPorts }}{{ $_ := set $mine (printf "sidecarHealthPorts.%s" $sidecar) $port }}{{ end -}}
{{- if $d.csiAddons.enabled }}{{ $_ := set $mine "csiAddons.port" $d.csiAddons.port }}{{ end -}}
{{- if $.Values.mounter.enabled }}{{ $_ := set $mine "mounterMetricsPort" $d.mounterMetricsPort }}{{ end -}}
{{- if and (eq $kind "rbd") $d.snapshotMetadata.enabled }}{{ $_ := set $mine "snapshotMetadata.port" $d.snapshotMetadata.port }}{{ end -}}
{{- range $field, $port := $mine -}}
{{- $key := toString $port -}}
{{- if hasKey $ports $key }}{{ fail (printf "%s.%s: port %s is also %s" $kind $field $key (get $ports $key)) }}{{ end -}}
{{- $_ := set $ports $key (printf "%s.%s" $kind $field) -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* Containers that need no privileges at all. */}}
{{- define "monoceph.restricted" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end -}}

{{- define "monoceph.snapshotMetadataName" -}}
{{ include "monoceph.fullname" . }}-rbd-snapshot-metadata
{{- end -}}

{{- define "monoceph.snapshotMetadataAudience" -}}
{{ .Values.rbd.snapshotMetadata.audience | default (include "monoceph.snapshotMetadataName" .) }}
{{- end -}}

{{- define "monoceph.snapshotMetadataTLSSecret" -}}
{{ .Values.rbd.snapshotMetadata.tls.existingSecret | default (printf "%s-tls" (include "monoceph.snapshotMetadataName" .)) }}
{{- end -}}

{{/* One kubernetes-csi sidecar of a driver's controller pod: pass (dict "root" $ "kind"
     "rbd"|"cephfs" "sidecar" "provisioner"|"snapshotter"|"resizer" "portName" <port name>
     "args" <its own flags>); its diagnostics port is <kind>.sidecarHealthPorts.<sidecar>. */}}
{{- define "monoceph.csiSidecar" -}}
{{- $sc := .root.Values.sidecars -}}
{{- $s := index $sc .sidecar -}}
{{- $port := index (index .root.Values .kind).sidecarHealthPorts .sidecar -}}
- name: csi-{{ .sidecar }}
  image: {{ $s.image }}
  imagePullPolicy: {{ $sc.pullPolicy }}
  args:
    - --csi-address=/csi/csi.sock
    - --http-endpoint=:{{ $port }}
    - --v={{ $sc.logLevel }}
    - --timeout={{ $sc.timeout }}
    {{- include "monoceph.leaderElectionArgs" .root | nindent 4 }}
    {{- range .args }}
    - {{ . }}
    {{- end }}
  ports:
    - name: {{ .portName }}
      containerPort: {{ $port }}
  livenessProbe:
    httpGet:
      # a replica that lost its lease renewal fails this; without leader election the
      # server's metrics page at least shows it serves
      path: {{ ternary "/healthz/leader-election" "/metrics" .root.Values.controller.leaderElection.enabled }}
      port: {{ .portName }}
    periodSeconds: 20
    timeoutSeconds: 10
    failureThreshold: 3
  securityContext:
    {{- include "monoceph.restricted" . | nindent 4 }}
  resources:
    {{- toYaml $s.resources | nindent 4 }}
  volumeMounts:
    - name: socket-dir
      mountPath: /csi
{{- end -}}

{{/* The node plugins' metrics listen address: node.metricsHost (an IPv6 one bracketed), or the
     node's IP from the NODE_IP variable (status.hostIP; monoceph brackets an IPv6 one). */}}
{{- define "monoceph.nodeMetricsAddress" -}}
{{- $h := .root.Values.node.metricsHost -}}
{{- if not $h -}}
$(NODE_IP):{{ .port }}
{{- else if contains ":" $h -}}
[{{ $h }}]:{{ .port }}
{{- else -}}
{{ $h }}:{{ .port }}
{{- end -}}
{{- end -}}

{{/* The CSIDriver object of a driver: pass (dict "root" $ "kind" "rbd"|"cephfs"). Also what
     the upgrade hook compares the installed object with. */}}
{{- define "monoceph.csidriver" -}}
{{- $d := index .root.Values .kind -}}
apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata:
  name: {{ $d.driverName }}
  labels:
    {{- include "monoceph.labels" .root | nindent 4 }}
spec:
  # RBD: ControllerPublishVolume records which node may write a ReadWriteOnce volume, so
  # Kubernetes must attach (and fence before re-attaching) each volume. CephFS: a shared
  # filesystem the MDS keeps coherent between clients; nothing to attach, as in ceph-csi's
  # cephfs.csi.ceph.com. The field is immutable: upgrade-hook.yaml replaces an object an
  # older chart made with another value.
  attachRequired: {{ eq .kind "rbd" }}
  podInfoOnMount: false
  fsGroupPolicy: {{ $d.fsGroupPolicy }}
  volumeLifecycleModes:
    - Persistent
  seLinuxMount: false
{{- end -}}

{{/* Whether the RBD node plugins read their Node's labels (read affinity, topology). */}}
{{- define "monoceph.readNodeLabels" -}}
{{- if or .Values.node.readNodeLabels .Values.cluster.readAffinity.enabled .Values.rbd.domainLabels }}true{{ end -}}
{{- end -}}

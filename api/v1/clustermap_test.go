package v1

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestParseClusterMap(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantErr string // substring; "" means success
	}{
		{"minimal", `[{"clusterID":"a","monitors":["127.0.0.1:6789"]}]`, ""},
		{"full", `[{"clusterID":"prod-1","monitors":["10.0.0.1","[v2:10.0.0.2:3300,v1:10.0.0.2:6789]"],
			"cephFS":{"subvolumeGroup":"g","radosNamespace":"ns"},"rbd":{"radosNamespace":"k8s"}}]`, ""},
		{"empty array", `[]`, "no clusters defined"},
		{"not json", `{`, "cluster map"},
		{"object not array", `{"clusterID":"a"}`, "cluster map"},
		{"unknown field", `[{"clusterID":"a","monitors":["m"],"monitor":["x"]}]`, `unknown field "monitor"`},
		{"missing id", `[{"monitors":["m"]}]`, `clusterID ""`},
		{"id with slash", `[{"clusterID":"a/b","monitors":["m"]}]`, `clusterID "a/b"`},
		{"id too long", `[{"clusterID":"` + strings.Repeat("x", 37) + `","monitors":["m"]}]`, "clusterID"},
		{"no monitors", `[{"clusterID":"a"}]`, "monitors: at least one"},
		{"bad port", `[{"clusterID":"a","monitors":["h:99999"]}]`, `bad port "99999"`},
		{"bad vector", `[{"clusterID":"a","monitors":["[v3:h:1]"]}]`, "not v1:<addr>"},
		{"duplicate", `[{"clusterID":"a","monitors":["m"]},{"clusterID":"a","monitors":["m"]}]`, "appears twice"},
		{"bad group", `[{"clusterID":"a","monitors":["m"],"cephFS":{"subvolumeGroup":"a/b"}}]`, "cephFS.subvolumeGroup"},
		{"bad rbd ns", `[{"clusterID":"a","monitors":["m"],"rbd":{"radosNamespace":"x y"}}]`, "rbd.radosNamespace"},
		{"trailing", `[{"clusterID":"a","monitors":["m"]}] []`, "trailing data"},
		// ceph-csi's config.json as its Helm chart writes it, every key set
		{"ceph-csi config.json", `[{"clusterID":"rook-ceph","monitors":["10.0.0.1:6789"],
			"rbd":{"radosNamespace":"k8s","netNamespaceFilePath":"","mirrorDaemonCount":2},
			"cephFS":{"subvolumeGroup":"csi","radosNamespace":"csi","netNamespaceFilePath":"","kernelMountOptions":"ms_mode=secure","fuseMountOptions":"debug"},
			"nfs":{"netNamespaceFilePath":""},"readAffinity":{"enabled":false,"crushLocationLabels":["topology.kubernetes.io/zone"]}}]`, ""},
		{"ceph-csi net namespace", `[{"clusterID":"a","monitors":["m"],"rbd":{"netNamespaceFilePath":"/var/lib/kubelet/plugins/rbd.csi.ceph.com/net"}}]`, "rbd.netNamespaceFilePath"},
		{"ceph-csi cephfs net namespace", `[{"clusterID":"a","monitors":["m"],"cephFS":{"netNamespaceFilePath":"/x"}}]`, "another network namespace is not supported"},
		{"ceph-csi nfs net namespace", `[{"clusterID":"a","monitors":["m"],"nfs":{"netNamespaceFilePath":"/x"}}]`, "nfs.netNamespaceFilePath"},
		{"read affinity without labels", `[{"clusterID":"a","monitors":["m"],"readAffinity":{"enabled":true}}]`, "crushLocationLabels must name"},
		{"read affinity", `[{"clusterID":"a","monitors":["m"],"readAffinity":{"enabled":true,"crushLocationLabels":["topology.kubernetes.io/zone"]}}]`, ""},
		{"mirror peers", `[{"clusterID":"b","monitors":["m"],"rbd":{"mirrorPeers":[{"clusterID":"a","poolIDs":{"2":5}}]}}]`, ""},
		{"mirror peer is an entry", `[{"clusterID":"a","monitors":["m"]},{"clusterID":"b","monitors":["m"],"rbd":{"mirrorPeers":[{"clusterID":"a","poolIDs":{"2":5}}]}}]`, "is an entry of this map too"},
		{"mirror peer twice", `[{"clusterID":"b","monitors":["m"],"rbd":{"mirrorPeers":[{"clusterID":"a","poolIDs":{"2":5}}]}},{"clusterID":"c","monitors":["m"],"rbd":{"mirrorPeers":[{"clusterID":"a","poolIDs":{"2":5}}]}}]`, `mirror peer of cluster "b" too`},
		{"mirror peer bad id", `[{"clusterID":"b","monitors":["m"],"rbd":{"mirrorPeers":[{"clusterID":"a/x","poolIDs":{"2":5}}]}}]`, `clusterID "a/x"`},
		{"mirror peer no pools", `[{"clusterID":"b","monitors":["m"],"rbd":{"mirrorPeers":[{"clusterID":"a"}]}}]`, "at least one pool ID"},
		{"mirror peer bad pool", `[{"clusterID":"b","monitors":["m"],"rbd":{"mirrorPeers":[{"clusterID":"a","poolIDs":{"rbd":5}}]}}]`, `poolIDs "rbd"`},
		{"mirror peer pools not one-to-one", `[{"clusterID":"b","monitors":["m"],"rbd":{"mirrorPeers":[{"clusterID":"a","poolIDs":{"2":5,"3":5}}]}}]`, `poolIDs "2" and "3" both map to pool 5`},
		{"mirror peer pool not canonical", `[{"clusterID":"b","monitors":["m"],"rbd":{"mirrorPeers":[{"clusterID":"a","poolIDs":{"02":5}}]}}]`, `poolIDs "02"`},
		{"mirror peer negative pool", `[{"clusterID":"b","monitors":["m"],"rbd":{"mirrorPeers":[{"clusterID":"a","poolIDs":{"2":-1}}]}}]`, `poolIDs "2"`},
		{"mount options with spaces", `[{"clusterID":"a","monitors":["m"],"cephFS":{"kernelMountOptions":"a b"}}]`, "without spaces"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := ParseClusterMap([]byte(tt.in))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if len(m) == 0 {
					t.Fatal("empty map without error")
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestMonitorEndpoints(t *testing.T) {
	tests := []struct {
		in   string
		want []string
		err  bool
	}{
		{"10.0.0.1", []string{"10.0.0.1:6789"}, false},
		{"10.0.0.1:3300", []string{"10.0.0.1:3300"}, false},
		{"mon.example.com", []string{"mon.example.com:6789"}, false},
		{"[v2:10.0.0.1:3300,v1:10.0.0.1:6789]", []string{"10.0.0.1:3300", "10.0.0.1:6789"}, false},
		{"[v2:10.0.0.1:3300/0,v1:10.0.0.1:6789/0]", []string{"10.0.0.1:3300", "10.0.0.1:6789"}, false},
		{"v1:10.0.0.1:6789", []string{"10.0.0.1:6789"}, false},
		{"[2001:db8::1]:6789", []string{"[2001:db8::1]:6789"}, false},
		{"2001:db8::1", []string{"[2001:db8::1]:6789"}, false},
		{"", nil, true},
		{"h:0", nil, true},
		{"h:x", nil, true},
		{"a b", nil, true},
	}
	for _, tt := range tests {
		got, err := MonitorEndpoints(tt.in)
		if (err != nil) != tt.err {
			t.Errorf("MonitorEndpoints(%q) error = %v, want error %v", tt.in, err, tt.err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("MonitorEndpoints(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestLookupAndDefaults(t *testing.T) {
	m := ClusterMap{
		{ClusterID: "a", Monitors: []string{"m1", "m2"}},
		{ClusterID: "b", Monitors: []string{"m3"}, CephFS: CephFSDefaults{SubvolumeGroup: "g"}},
	}
	a, ok := m.Lookup("a")
	if !ok || a.MonHost() != "m1,m2" || a.SubvolumeGroupOrDefault() != DefaultSubvolumeGroup {
		t.Fatalf("lookup a = %+v, %v", a, ok)
	}
	if b, _ := m.Lookup("b"); b.SubvolumeGroupOrDefault() != "g" {
		t.Fatalf("group of b = %q", b.SubvolumeGroupOrDefault())
	}
	if _, ok := m.Lookup("c"); ok {
		t.Fatal("lookup of unknown cluster succeeded")
	}
}

// FuzzParseClusterMap: whatever ParseClusterMap accepts is valid, survives a round trip through
// JSON unchanged, and every monitor of it has dialable endpoints; nothing it is given panics.
func FuzzParseClusterMap(f *testing.F) {
	for _, seed := range []string{
		`[{"clusterID":"a","monitors":["127.0.0.1:6789"]}]`,
		`[{"clusterID":"prod-1","monitors":["10.0.0.1","[v2:10.0.0.2:3300,v1:10.0.0.2:6789]","v1:[::1]:6789"],
			"cephFS":{"subvolumeGroup":"g","radosNamespace":"ns"},"rbd":{"radosNamespace":"k8s"}}]`,
		`[{"clusterID":"a","monitors":["m"]},{"clusterID":"b","monitors":["[v2:h:1]"]}]`,
		`[]`, `{`, `[{"clusterID":"a/b","monitors":["m"]}]`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseClusterMap(data)
		if err != nil {
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("accepted a map that does not validate: %v", err)
		}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseClusterMap(b)
		if err != nil || !reflect.DeepEqual(m, again) {
			t.Fatalf("round trip changed the map: %v\n%#v\n%#v", err, m, again)
		}
		for _, c := range m {
			if _, ok := m.Lookup(c.ClusterID); !ok {
				t.Fatalf("cluster %q not found by Lookup", c.ClusterID)
			}
			for _, mon := range c.Monitors {
				eps, err := MonitorEndpoints(mon)
				if err != nil || len(eps) == 0 {
					t.Fatalf("accepted monitor %q has no endpoints: %v", mon, err)
				}
			}
		}
	})
}

func TestCrushLocation(t *testing.T) {
	labels := map[string]string{"topology.kubernetes.io/zone": "z1", "topology.kubernetes.io/region": "r1",
		"kubernetes.io/hostname": "n1", "topology.io/rack": "bad value", "plain": "p1"}
	for _, tc := range []struct {
		name string
		r    ReadAffinity
		want string
	}{
		{"off", ReadAffinity{CrushLocationLabels: []string{"topology.kubernetes.io/zone"}}, ""},
		{"zone", ReadAffinity{Enabled: true, CrushLocationLabels: []string{"topology.kubernetes.io/zone"}}, "zone=z1"},
		{"sorted", ReadAffinity{Enabled: true, CrushLocationLabels: []string{"topology.kubernetes.io/zone", "topology.kubernetes.io/region", "kubernetes.io/hostname"}}, "hostname=n1 region=r1 zone=z1"},
		{"label without prefix", ReadAffinity{Enabled: true, CrushLocationLabels: []string{"plain"}}, "plain=p1"},
		{"missing label", ReadAffinity{Enabled: true, CrushLocationLabels: []string{"topology.kubernetes.io/rack"}}, ""},
		{"value CRUSH cannot take", ReadAffinity{Enabled: true, CrushLocationLabels: []string{"topology.io/rack", "topology.kubernetes.io/zone"}}, "zone=z1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.r.CrushLocation(labels); got != tc.want {
				t.Errorf("CrushLocation = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestMirrorPeerLookup: a volume ID minted on site A (cluster a, pool 2) resolves on site B's
// map to B's monitors and B's pool 5; B's own IDs resolve unchanged; an unmapped pool is an
// error, never the same number taken for another pool.
func TestMirrorPeerLookup(t *testing.T) {
	m, err := ParseClusterMap([]byte(`[{"clusterID":"b","monitors":["mb"],"rbd":{"mirrorPeers":[{"clusterID":"a","poolIDs":{"2":5,"3":7}}]}}]`))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		cluster  string
		pool     int64
		found    bool
		mons     string
		wantPool int64
		wantErr  string
	}{
		{"b", 2, true, "mb", 2, ""},
		{"a", 2, true, "mb", 5, ""},
		{"a", 3, true, "mb", 7, ""},
		{"a", 4, true, "mb", 0, `pool ID 4 of cluster "a" has no entry`},
		{"c", 2, false, "", 0, ""},
	}
	for _, tt := range tests {
		if _, ok := m.Lookup(tt.cluster); ok != (tt.found && tt.cluster == "b") {
			t.Errorf("Lookup(%q) found = %v: only the map's own cluster IDs resolve there (CephFS, classes)", tt.cluster, ok)
		}
		c, ok := m.LookupRBD(tt.cluster)
		if ok != tt.found {
			t.Fatalf("LookupRBD(%q) found = %v, want %v", tt.cluster, ok, tt.found)
		}
		if !ok {
			continue
		}
		if c.MonHost() != tt.mons {
			t.Errorf("Lookup(%q) monitors %q, want %q", tt.cluster, c.MonHost(), tt.mons)
		}
		got, err := c.RBDPoolID(tt.pool)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("RBDPoolID(%q, %d) error = %v, want %q", tt.cluster, tt.pool, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.wantPool {
			t.Errorf("RBDPoolID(%q, %d) = %d, %v; want %d", tt.cluster, tt.pool, got, err, tt.wantPool)
		}
	}
}

package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestInventoryMisuse: a bad invocation fails with a line that says what is wrong, before
// anything is read from Kubernetes or Ceph.
func TestInventoryMisuse(t *testing.T) {
	good := writeMap(t, `[{"clusterID":"a","monitors":["127.0.0.1:6789"]}]`)
	kubeconfig := writeMap(t, "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"+
		"contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {token: x}}]\ncurrent-context: c\n")
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unknown output", []string{"-o", "yaml"}, 2, "-o is table, json or prometheus"},
		{"an argument", []string{"extra"}, 2, "takes no arguments"},
		{"no cluster map", []string{"--cluster-config", "/nonexistent/clusters.json", "--kubeconfig", kubeconfig}, 1, "clusters.json"},
		{"no Ceph user", []string{"--cluster-config", good, "--kubeconfig", kubeconfig}, 1, "name the Ceph user"},
		{"bad secret reference", []string{"--cluster-config", good, "--kubeconfig", kubeconfig, "--secret", "x"}, 1, "want NAMESPACE/NAME"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(append([]string{"inventory"}, tc.args...), &stdout, &stderr)
			if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("code %d, stderr %q; want %d and %q", code, stderr.String(), tc.code, tc.want)
			}
		})
	}
}

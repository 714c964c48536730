package mount

import (
	"slices"
	"testing"
)

func TestParseFuseOptions(t *testing.T) {
	tests := []struct {
		name  string
		lists []string
		want  []string
		bad   bool
	}{
		{name: "empty", lists: []string{""}, want: nil},
		{name: "fuse options", lists: []string{"debug,max_read=131072"}, want: []string{"debug", "max_read=131072"}},
		{name: "ceph settings", lists: []string{"--client_cache_size=1000, --debug-client=20"}, want: []string{"--client_cache_size=1000", "--debug-client=20"}},
		{name: "merged with mount flags, repeats dropped", lists: []string{"debug,", "debug", "noatime"}, want: []string{"debug", "noatime"}},
		{name: "client_fs", lists: []string{"--client_fs=other"}, bad: true},
		{name: "client-mountpoint with dashes", lists: []string{"--client-mountpoint=/"}, bad: true},
		{name: "mount timeout", lists: []string{"--client_mount_timeout=1000"}, bad: true},
		{name: "monitors", lists: []string{"--mon_host=10.0.0.1"}, bad: true},
		{name: "key", lists: []string{"--key=AQB"}, bad: true},
		{name: "keyfile", lists: []string{"--keyfile=/etc/shadow"}, bad: true},
		{name: "keyring", lists: []string{"--keyring=/x"}, bad: true},
		{name: "id", lists: []string{"--id=admin"}, bad: true},
		{name: "name", lists: []string{"--name=client.admin"}, bad: true},
		{name: "admin socket", lists: []string{"--admin_socket=/tmp/x"}, bad: true},
		{name: "log file", lists: []string{"--log_file=/etc/passwd"}, bad: true},
		{name: "short flag", lists: []string{"-r"}, bad: true},
		{name: "short flag with value", lists: []string{"-m=10.0.0.1"}, bad: true},
		{name: "bare double dash", lists: []string{"--"}, bad: true},
		{name: "blank inside", lists: []string{"debug -r /"}, bad: true},
		{name: "fsname", lists: []string{"fsname=x"}, bad: true},
		{name: "subtype", lists: []string{"subtype=x"}, bad: true},
		{name: "no name", lists: []string{"=x"}, bad: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseFuseOptions(tt.lists...)
			if tt.bad {
				if err == nil {
					t.Fatalf("ParseFuseOptions(%q) = %q, want an error", tt.lists, got)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("ParseFuseOptions(%q) = %q, %v; want %q", tt.lists, got, err, tt.want)
			}
		})
	}
}

func TestParseKernelOptions(t *testing.T) {
	tests := []struct {
		name string
		list string
		want []string
		bad  bool
	}{
		{name: "empty", list: "", want: nil},
		{name: "plain", list: "noatime,rsize=16777216,recover_session=clean", want: []string{"noatime", "rsize=16777216", "recover_session=clean"}},
		{name: "name", list: "name=admin", bad: true},
		{name: "secret", list: "secret=AQB", bad: true},
		{name: "secretfile", list: "secretfile=/x", bad: true},
		{name: "mds_namespace", list: "mds_namespace=other", bad: true},
		{name: "fs", list: "fs=other", bad: true},
		{name: "mon_addr", list: "mon_addr=10.0.0.1", bad: true},
		{name: "conf", list: "conf=/etc/ceph/other.conf", bad: true},
		{name: "flag", list: "-t", bad: true},
		{name: "control character", list: "noatime\n", want: []string{"noatime"}}, // trimmed at the end
		{name: "control character inside", list: "no\tatime", bad: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseKernelOptions(tt.list)
			if tt.bad {
				if err == nil {
					t.Fatalf("ParseKernelOptions(%q) = %q, want an error", tt.list, got)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("ParseKernelOptions(%q) = %q, %v; want %q", tt.list, got, err, tt.want)
			}
		})
	}
}

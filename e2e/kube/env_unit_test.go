package kube

import "testing"

func TestListsEntry(t *testing.T) {
	// as Pacific 16.2.15 lists them
	out := "127.0.0.2:0/3243308824 2026-11-24T17:39:06.405696+0000\n" +
		"127.0.0.1:0/3775806255 2026-11-24T17:27:18.252562+0000\n" +
		"cidr:198.51.100.16:0/28 2031-11-23T17:10:56.094752+0000\n"
	for _, tt := range []struct {
		entry string
		want  bool
	}{
		{"127.0.0.2:0/32", false}, // a client whose nonce starts with 32 is not the range
		{"127.0.0.2:0/3243308824", true},
		{"198.51.100.16:0/28", true},
		{"198.51.100.16:0/2", false},
		{"127.0.0.1:0/32", false},
		{"", false},
	} {
		if got := listsEntry(out, tt.entry); got != tt.want {
			t.Errorf("listsEntry(%q) = %v, want %v", tt.entry, got, tt.want)
		}
	}
}

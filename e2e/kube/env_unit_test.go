package kube

import (
	"fmt"
	"testing"
)

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

func TestBlocklistOf(t *testing.T) {
	// as Pacific 16.2.15 lists them: a client and a range of 127.0.0.4, others around
	out := "127.0.0.4:0/2265336984 2026-11-29T06:58:15.134779+0000\n" +
		"127.0.0.40:0/1 2026-11-29T06:58:15.134779+0000\n" +
		"cidr:127.0.0.4:0/32 2031-11-28T06:33:15.367518+0000\n" +
		"127.0.0.2:0/3177734217 2026-11-29T06:52:30.934182+0000\n"
	for ip, want := range map[string]string{
		"127.0.0.4": "[127.0.0.4:0/2265336984 127.0.0.4:0/32]", // not 127.0.0.40's
		"127.0.0.3": "[]",
	} {
		if got := fmt.Sprint(blocklistOf(out, ip)); got != want {
			t.Errorf("blocklistOf(%s) = %s, want %s", ip, got, want)
		}
	}
}

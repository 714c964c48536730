package cephname

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	tests := []struct {
		name string
		in   string
		msg  string // "" for valid
	}{
		{"user", "csi-rbd-node", ""},
		{"pool", "rbd", ""},
		{"image of the controller", "csi-vol-abcdefghijklmnop", ""},
		{"dots and underscores", "_my.pool_2", ""},
		{"digits first", "2nd", ""},
		{"longest", strings.Repeat("a", MaxLen), ""},
		{"empty", "", "is empty"},
		{"too long", strings.Repeat("a", MaxLen+1), "256 characters long"},
		{"option", "-oX", "want 1-255 characters of [A-Za-z0-9_.-], starting with a letter, digit or underscore"},
		{"long option", "--keyfile=/etc/shadow", "want"},
		{"second mount option", "admin,secretfile=/etc/shadow", "want"},
		{"comma alone", "admin,ro", "want"},
		{"path", "../../../dev/sda", "want"},
		{"dot", ".", "want"},
		{"dot dot", "..", "want"},
		{"dot file", ".snap", "want"},
		{"slash", "a/b", "want"},
		{"equals", "a=b", "want"},
		{"blank", "a b", "want"},
		{"newline", "a\nb", "want"},
		{"NUL", "a\x00b", "want"},
		{"at", "img@snap", "want"},
		{"non-ASCII", "bäd", "want"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Check(tt.in)
			if tt.msg == "" {
				if err != nil {
					t.Fatalf("Check(%q) = %v", tt.in, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("Check(%q) = %v, want an error containing %q", tt.in, err, tt.msg)
			}
		})
	}
}

func TestCheckPath(t *testing.T) {
	tests := []struct {
		name string
		in   string
		msg  string
	}{
		{"subvolume", "/volumes/csi/csi-vol-x/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", ""},
		{"root", "/", ""},
		{"pre-provisioned", "/exports/team_a", ""},
		{"empty", "", "want a clean absolute path"},
		{"relative", "volumes/csi", "want a clean absolute path"},
		{"trailing slash", "/volumes/", "want a clean absolute path"},
		{"double slash", "/volumes//csi", "want a clean absolute path"},
		{"dot dot", "/volumes/../../../dev/sda", "want a clean absolute path"},
		{"clean but escaping", "/../dev/sda", "want a clean absolute path"},
		{"snapshot directory", "/volumes/csi/sub/.snap", `component ".snap"`},
		{"option component", "/volumes/-oX", `component "-oX"`},
		{"comma", "/volumes/a,b", `component "a,b"`},
		{"blank", "/volumes/a b", `component "a b"`},
		{"too long", "/" + strings.Repeat("a/", MaxPathLen/2) + "a", "4096 characters long"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckPath(tt.in)
			if tt.msg == "" {
				if err != nil {
					t.Fatalf("CheckPath(%q) = %v", tt.in, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("CheckPath(%q) = %v, want an error containing %q", tt.in, err, tt.msg)
			}
		})
	}
}

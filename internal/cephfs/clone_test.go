package cephfs

import (
	"encoding/json"
	"testing"

	"github.com/ceph/go-ceph/cephfs/admin"
)

// TestCloneProgress: the ABORTED message of a clone in progress carries the volumes module's
// progress report where it has one (Tentacle), nothing where not (Pacific, Reef).
func TestCloneProgress(t *testing.T) {
	tests := []struct {
		status, want string
	}{
		// fs clone status of Tentacle 20.2 (fs-volumes.rst), of Pacific 16.2.15 and Reef 18.2.7
		{`{"state":"in-progress","source":{"volume":"myfs","subvolume":"s","snapshot":"n"},` +
			`"progress_report":{"percentage cloned":"12.24%","amount cloned":"376M/3.0G","files cloned":"4/6"}}`,
			", 12.24% copied: 376M/3.0G, 4/6 files"},
		{`{"state":"in-progress","source":{"volume":"myfs","subvolume":"s","snapshot":"n"}}`, ""},
		{`{"state":"pending","source":{"volume":"myfs","subvolume":"s","snapshot":"n"}}`, ""},
	}
	for _, tt := range tests {
		var st admin.CloneStatus
		if err := json.Unmarshal([]byte(tt.status), &st); err != nil {
			t.Fatal(err)
		}
		if got := cloneProgress(&st); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.status, got, tt.want)
		}
	}
}

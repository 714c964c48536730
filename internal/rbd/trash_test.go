package rbd

import (
	"encoding/hex"
	"testing"
)

func TestDecodeTrashSpec(t *testing.T) {
	tests := []struct {
		name       string
		hex        string
		wantSource uint8
		wantName   string
		wantErr    bool
	}{
		// an entry a SIGKILLed `rbd rm big2` left on Ceph 16.2.15 (rados listomapvals rbd_trash)
		{"removing", "02011a00000003040000006269673252440" + "56bdc923d2c5244056bdc923d2c02", trashSourceRemoving, "big2", false},
		{"user, empty name", "0201110000000000000000" + "0000000000000000" + "0000000000000000" + "00", trashSourceUser, "", false},
		{"too short", "0201", 0, "", true},
		{"unknown compat", "02091a00000003040000006269673252440" + "56bdc923d2c5244056bdc923d2c02", 0, "", true},
		{"name past the end", "0201090000000309000000626967", 0, "", true},
		{"length past the end", "0201ff0000000304000000626967320000", 0, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := hex.DecodeString(tt.hex)
			if err != nil {
				t.Fatal(err)
			}
			src, name, err := decodeTrashSpec(b)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if err == nil && (src != tt.wantSource || name != tt.wantName) {
				t.Fatalf("got (%d, %q), want (%d, %q)", src, name, tt.wantSource, tt.wantName)
			}
		})
	}
}

func FuzzDecodeTrashSpec(f *testing.F) {
	b, _ := hex.DecodeString("02011a00000003040000006269673252440" + "56bdc923d2c5244056bdc923d2c02")
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		_, name, err := decodeTrashSpec(b)
		if err == nil && len(name) > len(b) {
			t.Fatalf("name of %d bytes from %d bytes of input", len(name), len(b))
		}
	})
}

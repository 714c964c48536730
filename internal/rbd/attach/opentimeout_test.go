package attach

import (
	"testing"
	"time"
)

func TestOpenTimeout(t *testing.T) {
	f := NewFuse(nil, nil)
	for _, tt := range []struct {
		name string
		req  Request
		want time.Duration
	}{
		{"plain", Request{}, 30 * time.Second},
		{"encrypted: the key load has its own time", Request{Encryption: &Encryption{}}, 30*time.Second + 2*time.Minute},
	} {
		if got := f.openTimeout(tt.req); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

package childtest

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/monoceph/monoceph/internal/faultpoint"
)

const childEnv = "MONOCEPH_CHILDTEST_CHILD"

// TestFaultPointChild is the helper of TestRunToFaultPoint: it passes the fault point its
// environment names, or none.
func TestFaultPointChild(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		t.Skip("helper process of TestRunToFaultPoint")
	}
	faultpoint.Hit("childtest.point")
}

// recorder is a testing.TB whose Fatalf records instead of ending the test.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

// TestRunToFaultPoint: a helper killed at its fault point passes; one that does not reach the
// point (it exits on its own) fails, saying so.
func TestRunToFaultPoint(t *testing.T) {
	tests := []struct {
		point string
		fail  string // in the failure, "" for none
	}{
		{"childtest.point", ""},
		{"childtest.elsewhere", "want death by SIGKILL"},
	}
	for _, tt := range tests {
		r := &recorder{TB: t}
		RunToFaultPoint(r, "TestFaultPointChild", tt.point, childEnv+"=1")
		if tt.fail == "" && r.failed != "" || !strings.Contains(r.failed, tt.fail) {
			t.Errorf("point %s: failure %q, want one containing %q", tt.point, r.failed, tt.fail)
		}
	}
}

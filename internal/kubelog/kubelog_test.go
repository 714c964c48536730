package kubelog

import (
	"context"
	"strings"
	"testing"

	"github.com/monoceph/monoceph/internal/logtest"
	"k8s.io/klog/v2"
)

func TestContextCapsOnlyWhatItIsGiven(t *testing.T) {
	buf := logtest.Capture(t, 10)

	base := klog.NewContext(context.Background(), klog.Background().WithValues("requestID", "r1"))
	capped := Context(base)
	if Context(capped) != capped {
		t.Error("capping a capped context wraps it again")
	}
	for _, tt := range []struct {
		name  string
		ctx   context.Context
		level int
		want  bool
	}{
		{"own logger at 4", base, 4, true},
		{"own logger at 10", base, 10, true},
		{"capped at 0", capped, 0, true},
		{"capped at the cap", capped, MaxVerbosity, true},
		{"capped above the cap", capped, MaxVerbosity + 1, false},
		{"capped at 8 (bodies)", capped, 8, false},
		{"capped at 10", capped, 10, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := klog.FromContext(tt.ctx)
			if got := l.V(tt.level).Enabled(); got != tt.want {
				t.Errorf("V(%d).Enabled() = %v, want %v", tt.level, got, tt.want)
			}
			// a logger derived with V, values and a name stays capped
			d := klog.FromContext(tt.ctx).WithName("client").WithValues("k", "v").V(1)
			if got := d.V(tt.level - 1).Enabled(); got != tt.want {
				t.Errorf("derived V(1).V(%d).Enabled() = %v, want %v", tt.level-1, got, tt.want)
			}
			msg := "message-" + strings.ReplaceAll(tt.name, " ", "-")
			l.V(tt.level).Info(msg)
			out := buf.String()
			if strings.Contains(out, msg) != tt.want {
				t.Fatalf("logged %v, want %v:\n%s", strings.Contains(out, msg), tt.want, out)
			}
			if tt.want {
				line := out[strings.LastIndex(out[:strings.Index(out, msg)], "\n")+1:]
				if !strings.Contains(line, "kubelog_test.go:") || !strings.Contains(line, `requestID="r1"`) {
					t.Errorf("log line lost the caller or the context's values: %s", line)
				}
			}
		})
	}
}

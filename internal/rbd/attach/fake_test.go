package attach

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/monoceph/monoceph/internal/ceph"
)

// fakeExec records every command line and answers from a script keyed by the command's first
// words. While a command runs it also checks the key file it names, the way the real tool
// would read it.
type fakeExec struct {
	t       *testing.T
	key     string
	answers map[string]answer // "rbd device map" → answer
	mu      sync.Mutex
	calls   [][]string
	keyRead []string // contents of --keyfile files seen while commands ran
}

type answer struct {
	out string
	err error
}

func (f *fakeExec) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	argv := append([]string{name}, args...)
	f.mu.Lock()
	f.calls = append(f.calls, argv)
	f.mu.Unlock()
	for i, a := range args {
		if a == "--keyfile" && i+1 < len(args) {
			fi, err := os.Stat(args[i+1])
			if err != nil {
				f.t.Errorf("%v: key file: %v", argv, err)
				continue
			}
			if fi.Mode().Perm() != 0o600 {
				f.t.Errorf("key file mode %v, want 0600", fi.Mode().Perm())
			}
			b, _ := os.ReadFile(args[i+1])
			f.keyRead = append(f.keyRead, string(b))
		}
	}
	words := strings.Join(argv, " ")
	best := ""
	for prefix := range f.answers {
		if strings.Contains(words, prefix) && len(prefix) > len(best) {
			best = prefix
		}
	}
	if best == "" {
		return nil, nil
	}
	return []byte(f.answers[best].out), f.answers[best].err
}

// assertNoSecret fails when any recorded command line holds the key.
func (f *fakeExec) assertNoSecret(t *testing.T) {
	t.Helper()
	for _, argv := range f.calls {
		for _, a := range argv {
			if strings.Contains(a, f.key) {
				t.Errorf("the key appears on a command line: %q", argv)
			}
		}
	}
}

func testCred(t *testing.T) (ceph.Credentials, string) {
	t.Helper()
	const key = "AQBr3V5kAAAAABAAbWFkZS11cCB0ZXN0IGtleQ=="
	c, err := ceph.NewCredentials("csi-node", key)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}

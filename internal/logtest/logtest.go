// Package logtest captures klog's output at a chosen verbosity, for tests of what is logged
// and, above all, what never is (keys, tokens).
package logtest

import (
	"bytes"
	"flag"
	"strconv"
	"strings"
	"sync"
	"testing"

	"k8s.io/klog/v2"
)

// Buffer holds what klog wrote since Capture or the last Reset.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String flushes klog and returns what it wrote.
func (b *Buffer) String() string {
	klog.Flush()
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Reset flushes klog and forgets what it wrote so far.
func (b *Buffer) Reset() {
	klog.Flush()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Reset()
}

// Capture sends klog's output at verbosity v into the returned buffer until the test ends,
// then restores -v=0 and logging to stderr. klog is global: tests that capture must not run
// in parallel.
func Capture(t testing.TB, v int) *Buffer {
	t.Helper()
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	for k, val := range map[string]string{"v": strconv.Itoa(v), "logtostderr": "false", "alsologtostderr": "false", "stderrthreshold": "FATAL"} {
		if err := fs.Set(k, val); err != nil {
			t.Fatal(err)
		}
	}
	buf := &Buffer{}
	klog.SetOutput(buf)
	t.Cleanup(func() {
		klog.Flush()
		_ = fs.Set("v", "0")
		_ = fs.Set("logtostderr", "true")
	})
	return buf
}

// Leaks reports which of secrets (whole or in fragments, see fragments) out holds.
func Leaks(out string, secrets ...string) []string {
	var found []string
	for _, s := range secrets {
		for _, frag := range fragments(s) {
			if strings.Contains(out, frag) {
				found = append(found, frag)
				break
			}
		}
	}
	return found
}

// fragments are s itself and every 12-character piece of it: a secret cut by a line break, a
// truncation, or the 16-byte lines of the hex dumps client-go logs protobuf bodies as, still
// leaks.
func fragments(s string) []string {
	out := []string{s}
	const n = 12
	for i := 0; i+n <= len(s); i++ {
		out = append(out, s[i:i+n])
	}
	return out
}

package hostmount

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestWithinOneCallPerPath: a call that does not return is abandoned at the caller's deadline
// and stays the only one on its path until it returns; later callers get ErrInFlight at once,
// without starting another call, while other paths are unaffected.
func TestWithinOneCallPerPath(t *testing.T) {
	release := make(chan struct{})
	var started atomic.Int32
	stuck := func() (int, error) {
		started.Add(1)
		<-release
		return 1, nil
	}
	path := "/stuck/mount"
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := within(ctx, "stat", path, stuck); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("stuck call = %v, want its deadline", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("the stuck call returned after %v", d)
	}
	if InFlight() != 1 {
		t.Fatalf("%d calls in flight, want 1", InFlight())
	}
	for _, p := range []string{path, path + "/", "/stuck/x/../mount"} {
		start := time.Now()
		_, err := within(context.Background(), "statfs", p, stuck)
		if !errors.Is(err, ErrInFlight) || time.Since(start) > 100*time.Millisecond {
			t.Fatalf("second call on %s = %v after %v, want ErrInFlight at once", p, err, time.Since(start))
		}
	}
	if n := started.Load(); n != 1 {
		t.Fatalf("%d calls started on the stuck path, want 1", n)
	}
	if v, err := within(context.Background(), "stat", "/other", func() (int, error) { return 2, nil }); v != 2 || err != nil {
		t.Fatalf("call on another path = %d, %v", v, err)
	}
	close(release)
	for deadline := time.Now().Add(5 * time.Second); InFlight() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the released call is still in flight")
		}
	}
	if v, err := within(context.Background(), "stat", path, func() (int, error) { return 3, nil }); v != 3 || err != nil {
		t.Fatalf("call after the stuck one returned = %d, %v", v, err)
	}
	done, cancelDone := context.WithCancel(context.Background())
	cancelDone()
	if _, err := within(done, "stat", path, stuck); !errors.Is(err, context.Canceled) || started.Load() != 1 {
		t.Fatalf("call with an ended context = %v (%d started), want Canceled without a call", err, started.Load())
	}
}

func TestBoundedCalls(t *testing.T) {
	ctx := context.Background()
	if fi, err := StatWithin(ctx, "/"); err != nil || !fi.IsDir() {
		t.Fatalf("StatWithin(/) = %v, %v", fi, err)
	}
	if st, err := StatfsWithin(ctx, "/"); err != nil || st.Blocks == 0 {
		t.Fatalf("StatfsWithin(/) = %+v, %v", st, err)
	}
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(file, "user.monoceph", []byte("42"), 0); err != nil {
		t.Skipf("no user xattrs here: %v", err)
	}
	if b, err := GetxattrWithin(ctx, file, "user.monoceph", 32); err != nil || string(b) != "42" {
		t.Fatalf("GetxattrWithin = %q, %v", b, err)
	}
	missing := "/no/such/path"
	_, serr := StatWithin(ctx, missing)
	_, ferr := StatfsWithin(ctx, missing)
	_, xerr := GetxattrWithin(ctx, missing, "user.x", 8)
	for _, err := range []error{serr, ferr, xerr} {
		if !os.IsNotExist(err) {
			t.Errorf("%v, want ENOENT", err)
		}
	}
	if InFlight() != 0 {
		t.Fatalf("%d calls left in flight", InFlight())
	}
}

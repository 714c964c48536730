package hostmount

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// fakeExec records commands and fails those in fail.
type fakeExec struct {
	mu    sync.Mutex
	calls []string
	fail  map[string]bool
}

func (f *fakeExec) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := strings.Join(append([]string{name}, args...), " ")
	f.calls = append(f.calls, c)
	if f.fail[c] {
		return nil, errors.New(c + " failed")
	}
	return nil, nil
}

func TestBind(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name     string
		readOnly bool
		fail     []string
		want     []string
		wantErr  string
	}{
		{name: "read-write", want: []string{"mount --bind /s /t"}},
		{name: "read-only", readOnly: true, want: []string{"mount --bind /s /t", "mount -o remount,bind,ro /t"}},
		{name: "bind fails", fail: []string{"mount --bind /s /t"}, want: []string{"mount --bind /s /t"}, wantErr: "mount --bind /s /t failed"},
		{name: "read-only fails: undone", readOnly: true, fail: []string{"mount -o remount,bind,ro /t"},
			want: []string{"mount --bind /s /t", "mount -o remount,bind,ro /t", "umount /t"}, wantErr: "remount,bind,ro /t failed"},
		{name: "undo fails too", readOnly: true, fail: []string{"mount -o remount,bind,ro /t", "umount /t"},
			want: []string{"mount --bind /s /t", "mount -o remount,bind,ro /t", "umount /t"}, wantErr: "and undoing the bind mount: umount /t failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := &fakeExec{fail: map[string]bool{}}
			for _, c := range tt.fail {
				x.fail[c] = true
			}
			err := Bind(ctx, x, "/s", "/t", tt.readOnly)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("Bind = %v, want %q", err, tt.wantErr)
			}
			if strings.Join(x.calls, "; ") != strings.Join(tt.want, "; ") {
				t.Fatalf("ran %q, want %q", x.calls, tt.want)
			}
		})
	}
}

// Nothing mounted: no command runs.
func TestUnmountNothingMounted(t *testing.T) {
	dir := t.TempDir()
	x := &fakeExec{}
	for _, unmount := range []func(context.Context, *fakeExec, string) error{
		func(ctx context.Context, x *fakeExec, p string) error { return Unmount(ctx, x, p) },
		func(ctx context.Context, x *fakeExec, p string) error { return UnmountOrDetach(ctx, x, p) },
		func(ctx context.Context, x *fakeExec, p string) error { return LazyUnmount(ctx, x, p) },
	} {
		if err := unmount(context.Background(), x, dir); err != nil {
			t.Fatal(err)
		}
	}
	if len(x.calls) != 0 {
		t.Fatalf("ran %q", x.calls)
	}
}

// A mount that stays (the fake executor unmounts nothing): each function gives up after
// MaxStacked rounds, or at the first failure.
func TestUnmountStuck(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		unmount func(*fakeExec) error
		fail    []string
		calls   int
		wantErr string
	}{
		{"unmount", func(x *fakeExec) error { return Unmount(ctx, x, "/proc") }, nil, MaxStacked, fmt.Sprintf("still mounted after %d unmounts", MaxStacked)},
		{"unmount fails", func(x *fakeExec) error { return Unmount(ctx, x, "/proc") }, []string{"umount /proc"}, 1, "umount /proc failed"},
		{"unmount or detach", func(x *fakeExec) error { return UnmountOrDetach(ctx, x, "/proc") }, []string{"umount /proc"}, 2 * MaxStacked, fmt.Sprintf("still mounted after %d unmounts", MaxStacked)},
		{"unmount and detach fail", func(x *fakeExec) error { return UnmountOrDetach(ctx, x, "/proc") }, []string{"umount /proc", "umount -l /proc"}, 2, "umount -l /proc failed"},
		{"lazy", func(x *fakeExec) error { return LazyUnmount(ctx, x, "/proc") }, nil, MaxStacked, fmt.Sprintf("still mounted after %d lazy unmounts", MaxStacked)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := &fakeExec{fail: map[string]bool{}}
			for _, c := range tt.fail {
				x.fail[c] = true
			}
			err := tt.unmount(x)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || len(x.calls) != tt.calls {
				t.Fatalf("err = %v after %q; want %q after %d commands", err, x.calls, tt.wantErr, tt.calls)
			}
		})
	}
}

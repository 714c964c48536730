package hostmount

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Bounded filesystem calls.
//
// A stat, statfs or getxattr on a FUSE mount waits in the kernel until the daemon answers. A
// daemon that is stopped, stuck or still connecting to a hung cluster makes it wait forever,
// and the thread with it: a thread blocked in a system call cannot be taken back. So each
// call below runs in a goroutine the caller abandons when ctx ends, and at most one call per
// path is in flight: a caller that finds an earlier call on the same path still waiting gets
// ErrInFlight at once instead of blocking one more thread. However often a stuck mount is
// asked about (kubelet polls volume statistics and health), it costs one thread per path.

// ErrInFlight is the error of a call on a path where an earlier call has not returned yet:
// the filesystem does not answer.
var ErrInFlight = errors.New("an earlier call on this path has not returned: the filesystem does not answer")

type flight struct {
	op    string
	since time.Time
}

var (
	flightMu sync.Mutex
	inFlight = map[string]flight{} // cleaned path → the call waiting on it
)

// InFlight is the number of paths with a call waiting on them (for tests and metrics).
func InFlight() int {
	flightMu.Lock()
	defer flightMu.Unlock()
	return len(inFlight)
}

// within runs fn, a blocking call named op on path, and returns its result, or an error when
// ctx ends first (fn then finishes in the background) or when a call on path is in flight.
func within[T any](ctx context.Context, op, path string, fn func() (T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, fmt.Errorf("%s %s: %w", op, path, err)
	}
	key := filepath.Clean(path)
	flightMu.Lock()
	if f, busy := inFlight[key]; busy {
		flightMu.Unlock()
		return zero, fmt.Errorf("%s %s: %w (a %s has waited %s)", op, path, ErrInFlight, f.op, time.Since(f.since).Round(time.Millisecond))
	}
	inFlight[key] = flight{op: op, since: time.Now()}
	flightMu.Unlock()

	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1) // the goroutine finishes on its own if nobody waits any more
	go func() {
		v, err := fn()
		flightMu.Lock()
		delete(inFlight, key)
		flightMu.Unlock()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		return zero, fmt.Errorf("%s %s: %w", op, path, ctx.Err())
	}
}

// Unresponsive reports whether err, from one of the calls below, says the filesystem does not
// answer: the caller's time ran out, or an earlier call on the path is still waiting.
func Unresponsive(err error) bool {
	return errors.Is(err, ErrInFlight) || errors.Is(err, context.DeadlineExceeded)
}

// StatWithin stats path, giving up when ctx ends (see above). A stat on a FUSE mount waits for
// the daemon, and a stuck one would otherwise block the caller, and the volume's lock, for as
// long.
func StatWithin(ctx context.Context, path string) (os.FileInfo, error) {
	return within(ctx, "stat", path, func() (os.FileInfo, error) { return os.Stat(path) })
}

// StatfsWithin is statfs(2) of path, giving up when ctx ends.
func StatfsWithin(ctx context.Context, path string) (unix.Statfs_t, error) {
	return within(ctx, "statfs", path, func() (unix.Statfs_t, error) {
		var st unix.Statfs_t
		if err := unix.Statfs(path, &st); err != nil {
			return st, &os.PathError{Op: "statfs", Path: path, Err: err}
		}
		return st, nil
	})
}

// GetxattrWithin reads the extended attribute name of path (at most size bytes), giving up
// when ctx ends.
func GetxattrWithin(ctx context.Context, path, name string, size int) ([]byte, error) {
	return within(ctx, "getxattr "+name, path, func() ([]byte, error) {
		buf := make([]byte, size)
		n, err := unix.Getxattr(path, name, buf)
		if err != nil {
			return nil, &os.PathError{Op: "getxattr " + name, Path: path, Err: err}
		}
		return buf[:n], nil
	})
}

package ceph_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephtest"
)

// managerPID is the pid of the local cluster's manager.
func managerPID(t *testing.T) int {
	t.Helper()
	pidFile := os.Getenv("CEPH_DIR") + "/run/mgr.x.pid"
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("manager pid (%s): %v", pidFile, err)
	}
	mgr, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return mgr
}

// mgrConn is a connection to the local cluster for manager commands, closed at the end of
// the test.
func mgrConn(t *testing.T) *ceph.Conn {
	t.Helper()
	cl := cephtest.Env(t)
	p := ceph.NewPool(ceph.PoolOptions{Timeouts: ceph.Timeouts{Connect: 5 * time.Second, Op: 2 * time.Second}})
	t.Cleanup(p.Close)
	c, err := p.GetForMgr(context.Background(), cl.Monitors, cl.Admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Release)
	return c
}

// TestHungManagerCommandsAreCapped freezes the manager and sends 200 concurrent manager
// commands on one connection: each is abandoned at its caller's 2 s deadline, but a librados
// call already sent holds its thread until the manager answers, so the process must not gain a
// thread per command: at most PoolOptions.MaxMgrCommands run, the rest wait for a slot and
// give up at their deadline without a call. After the manager resumes, commands work again.
func TestHungManagerCommandsAreCapped(t *testing.T) {
	c := mgrConn(t)
	mgr := managerPID(t)
	cmd := func(ctx context.Context) error {
		_, err := ceph.MgrCommand(ctx, c, map[string]any{"prefix": "pg stat"})
		return err
	}
	ctx := context.Background()
	if err := cmd(ctx); err != nil {
		t.Fatal(err)
	}
	before := cephtest.Threads(t)
	resume := cephtest.Freeze(t, mgr)
	const calls = 200
	var wg sync.WaitGroup
	var timeouts atomic.Int32
	start := time.Now()
	for range calls {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			if err := cmd(cctx); errors.Is(err, ceph.ErrTimeout) {
				timeouts.Add(1)
			} else {
				t.Errorf("command to a frozen manager: %v, want a timeout", err)
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	grew := cephtest.Threads(t) - before
	t.Logf("%d commands to a frozen manager: %d timed out in %v; threads %d → %d", calls, timeouts.Load(), took.Round(time.Millisecond), before, before+grew)
	if took > 10*time.Second {
		t.Errorf("the commands took %v, want their 2 s deadline", took)
	}
	if grew > ceph.DefaultMaxMgrCommands+10 {
		t.Errorf("the process gained %d threads over %d commands to a frozen manager", grew, calls)
	}
	resume()
	cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	for {
		err := cmd(cctx)
		if err == nil {
			break
		}
		if cctx.Err() != nil {
			t.Fatalf("after the manager resumed: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestHungManagerIsBoundedAndSurvived freezes the local cluster's manager: a manager command
// must return DEADLINE_EXCEEDED-class errors at the caller's deadline, and the manager's late
// replies must not crash the process (Pacific's librados does, with rados_mon_op_timeout set).
func TestHungManagerIsBoundedAndSurvived(t *testing.T) {
	c := mgrConn(t)
	mgr := managerPID(t)
	// served by the manager itself, without a detour through CephFS
	cmd := map[string]any{"prefix": "pg stat"}

	resume := cephtest.Freeze(t, mgr)
	for range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		start := time.Now()
		_, err := ceph.MgrCommand(ctx, c, cmd)
		cancel()
		if !errors.Is(err, ceph.ErrTimeout) || time.Since(start) > 3*time.Second {
			t.Fatalf("command to a frozen manager: %v after %v, want a timeout at the 2s deadline", err, time.Since(start))
		}
	}
	resume()
	// the abandoned calls complete now; the process must survive them and keep working
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, err := ceph.MgrCommand(ctx, c, cmd); err != nil {
		t.Fatalf("after the manager resumed: %v", err)
	}
	time.Sleep(2 * time.Second)
}

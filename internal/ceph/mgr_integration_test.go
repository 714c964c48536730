package ceph_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephtest"
)

// TestHungManagerIsBoundedAndSurvived freezes the local cluster's manager: a manager command
// must return DEADLINE_EXCEEDED-class errors at the caller's deadline, and the manager's late
// replies must not crash the process (Pacific's librados does, with rados_mon_op_timeout set).
func TestHungManagerIsBoundedAndSurvived(t *testing.T) {
	cl := cephtest.Env(t)
	pidFile := os.Getenv("CEPH_DIR") + "/run/mgr.x.pid"
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("manager pid (%s): %v", pidFile, err)
	}
	mgr, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	p := ceph.NewPool(ceph.PoolOptions{Timeouts: ceph.Timeouts{Connect: 5 * time.Second, Op: 2 * time.Second}})
	defer p.Close()
	c, err := p.GetForMgr(context.Background(), cl.Monitors, cl.Admin)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	// served by the manager itself, without a detour through CephFS
	cmd := map[string]any{"prefix": "pg stat"}

	if err := syscall.Kill(mgr, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(mgr, syscall.SIGCONT)
		}
	}
	defer resume()
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

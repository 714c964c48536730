// Package faults is the fault-injection suite: CO-like load (deadlines, retries under the same
// name) on the RBD and CephFS controllers, run as the real binary, while the suite stops and
// restarts the monitor, freezes and kills the OSD, freezes the manager and SIGKILLs the
// controllers; then 1,000 garbage requests per driver. After each fault every RPC must have
// ended within its deadline, every name must have got exactly one volume, and once everything
// is deleted nothing may be left on the cluster. It runs on a Ceph cluster of its own (see
// cluster), started by the suite; `make faults` runs it.
package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

type phase struct {
	name  string
	fault func(t *testing.T)
}

func TestFaults(t *testing.T) {
	if os.Getenv("MONOCEPH_FAULTS") != "1" {
		t.Skip("the fault-injection suite runs with MONOCEPH_FAULTS=1 (make faults)")
	}
	c := startCluster(t)
	c.cli(t, "ceph", "fs", "subvolumegroup", "create", fsName, fsGroup)
	mapFile := filepath.Join(t.TempDir(), "clusters.json")
	if err := os.WriteFile(mapFile, []byte(fmt.Sprintf(`[{"clusterID":"faults","monitors":[%q],"cephFS":{"subvolumeGroup":%q}}]`,
		c.env["CEPH_MONITORS"], fsGroup)), 0o600); err != nil {
		t.Fatal(err)
	}
	in := newInspector(t, c)
	if left := in.leftovers(t); len(left) != 0 {
		t.Fatalf("the suite's cluster is not empty before the run: %v", left)
	}
	rbdD, fsD := startDriver(t, "rbd", mapFile), startDriver(t, "cephfs", mapFile)
	secrets := map[string]string{"userID": "admin", "userKey": c.env["CEPH_ADMIN_KEY"]}
	rbdCO := &co{d: rbdD, params: map[string]string{"clusterID": "faults", "pool": rbdPool}, secrets: secrets, size: 16 << 20, ids: map[string]string{}}
	fsCO := &co{d: fsD, params: map[string]string{"clusterID": "faults", "fsName": fsName}, secrets: secrets, size: 16 << 20, ids: map[string]string{}}

	phases := []phase{
		{"monitor stopped and restarted", func(t *testing.T) {
			c.signal(t, "mon.a", syscall.SIGTERM)
			time.Sleep(8 * time.Second)
			c.restart(t)
		}},
		{"OSD frozen, then killed and restarted", func(t *testing.T) {
			c.signal(t, "osd.0", syscall.SIGSTOP)
			time.Sleep(8 * time.Second)
			c.signal(t, "osd.0", syscall.SIGKILL)
			c.restart(t)
		}},
		{"manager frozen during CephFS load", func(t *testing.T) {
			c.signal(t, "mgr.x", syscall.SIGSTOP)
			time.Sleep(15 * time.Second)
			c.signal(t, "mgr.x", syscall.SIGCONT)
		}},
		{"controllers SIGKILLed during creates and deletes", func(t *testing.T) {
			for range 6 {
				time.Sleep(300*time.Millisecond + rand.N(1200*time.Millisecond))
				rbdD.kill()
				fsD.kill()
			}
		}},
	}
	var report strings.Builder
	for i, p := range phases {
		ok := t.Run(p.name, func(t *testing.T) {
			st := newStats()
			rbdCO.st, fsCO.st = st, st
			rbdCO.until = time.Now().Add(4 * time.Minute)
			fsCO.until = rbdCO.until
			logs := []*logMark{markLog(t, rbdD), markLog(t, fsD)}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); rbdCO.load(fmt.Sprintf("p%d-rbd", i), 3, true, true, stop) }()
			go func() { defer wg.Done(); fsCO.load(fmt.Sprintf("p%d-fs", i), 2, true, false, stop) }()
			time.Sleep(3 * time.Second)
			start := time.Now()
			p.fault(t)
			t.Logf("fault injected and cleared in %.1f s", time.Since(start).Seconds())
			time.Sleep(3 * time.Second)
			close(stop)
			wg.Wait()
			serverWorst := max(logs[0].worst(t), logs[1].worst(t))
			left := in.leftovers(t)
			fmt.Fprintf(&report, "%s:\n%s    worst server-side RPC: %v; kills: %d; leftovers: %s\n", p.name, st.table(),
				serverWorst.Round(time.Millisecond), rbdD.kills+fsD.kills, orNone(left))
			for _, pr := range st.problems {
				t.Error(pr)
			}
			if serverWorst > deadline+time.Second {
				t.Errorf("an RPC ran %v in the driver, past the CO's %v deadline", serverWorst, deadline)
			}
			if len(left) != 0 {
				t.Errorf("after deleting everything the cluster still holds: %v", left)
			}
		})
		if !ok {
			break
		}
	}
	t.Run("1,000 garbage requests per driver change nothing", func(t *testing.T) {
		st := newStats()
		rbdCO.st, fsCO.st = st, st
		rbdCO.until = time.Now().Add(2 * time.Minute)
		fsCO.until = rbdCO.until
		// real volumes and snapshots for the requests to point near
		rv, _ := rbdCO.createVolume("g-base", nil)
		rs, _ := rbdCO.createSnapshot("g-base-snap", rv)
		fv, _ := fsCO.createVolume("g-base", nil)
		fss, _ := fsCO.createSnapshot("g-base-snap", fv)
		before := in.journalState(t)
		for _, d := range []struct {
			co   *co
			vol  string
			snap string
		}{{rbdCO, rv, rs}, {fsCO, fv, fss}} {
			reqs := garbage(d.co.d.typ, d.co.params, secrets, d.vol, d.snap, 1000)
			sem := make(chan struct{}, 8)
			var wg sync.WaitGroup
			for _, r := range reqs {
				wg.Add(1)
				sem <- struct{}{}
				go func() {
					defer wg.Done()
					defer func() { <-sem }()
					err := d.co.call("garbage", func(ctx context.Context) error { return r(ctx, d.co.d.client) })
					if err == nil {
						st.problem("a garbage request to the %s driver succeeded", d.co.d.typ)
					} else if c := status.Code(err); c == codes.Internal || c == codes.Unknown {
						st.problem("a garbage request to the %s driver failed with %v: %v", d.co.d.typ, c, err)
					}
				}()
			}
			wg.Wait()
		}
		after := in.journalState(t)
		changed := diff(before, after)
		rbdCO.deleteSnapshot(rs)
		rbdCO.deleteVolume(rv)
		fsCO.deleteSnapshot(fss)
		fsCO.deleteVolume(fv)
		left := in.leftovers(t)
		fmt.Fprintf(&report, "garbage (1,000 per driver):\n%s    journal changes: %s; leftovers: %s\n", st.table(), orNone(changed), orNone(left))
		for _, pr := range st.problems {
			t.Error(pr)
		}
		if len(changed) != 0 {
			t.Errorf("garbage requests changed the journals: %v", changed)
		}
		if len(left) != 0 {
			t.Errorf("after deleting everything the cluster still holds: %v", left)
		}
	})
	t.Run("a guarded test tier ends, naming the daemon, when the OSD dies", func(t *testing.T) {
		testGuardNamesDeadDaemon(t, c)
	})
	t.Logf("fault-injection summary:\n%s", report.String())
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	if len(s) > 20 {
		return fmt.Sprintf("%v … (%d in all)", s[:20], len(s))
	}
	return fmt.Sprint(s)
}

// diff lists what is in only one of two sorted lists, marked - (gone) and + (new).
func diff(before, after []string) []string {
	var out []string
	for _, b := range before {
		if !slices.Contains(after, b) {
			out = append(out, "-"+b)
		}
	}
	for _, a := range after {
		if !slices.Contains(before, a) {
			out = append(out, "+"+a)
		}
	}
	return out
}

// logMark remembers where a driver's log was when a phase began, to read the server-side
// duration of every RPC the phase made (the driver logs each at -v=4).
type logMark struct {
	path   string
	offset int64
}

func markLog(t *testing.T, d *driver) *logMark {
	t.Helper()
	p := filepath.Join(d.dir, "driver.log")
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return &logMark{path: p, offset: fi.Size()}
}

var durationRE = regexp.MustCompile(`duration="([0-9.]+[a-zµ]+)"`)

func (m *logMark) worst(t *testing.T) time.Duration {
	t.Helper()
	b, err := os.ReadFile(m.path)
	if err != nil {
		t.Fatal(err)
	}
	var worst time.Duration
	for _, match := range durationRE.FindAllSubmatch(b[m.offset:], -1) {
		if d, err := time.ParseDuration(string(match[1])); err == nil && d > worst {
			worst = d
		}
	}
	return worst
}

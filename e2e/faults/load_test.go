package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// deadline is the CO's deadline for one RPC (external-provisioner's default --timeout is 10 s).
const deadline = 10 * time.Second

// stats are what one phase's RPCs answered.
type stats struct {
	mu       sync.Mutex
	codes    map[string]map[codes.Code]int // method → code → count
	worst    map[string]time.Duration      // method → longest RPC as the client saw it
	problems []string                      // broken promises: one volume per name, deadlines
}

func newStats() *stats {
	return &stats{codes: map[string]map[codes.Code]int{}, worst: map[string]time.Duration{}}
}

func (s *stats) record(method string, err error, took time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.codes[method] == nil {
		s.codes[method] = map[codes.Code]int{}
	}
	s.codes[method][status.Code(err)]++
	if took > s.worst[method] {
		s.worst[method] = took
	}
	if took > deadline+time.Second {
		s.problems = append(s.problems, fmt.Sprintf("%s took %v, past its %v deadline", method, took, deadline))
	}
}

func (s *stats) problem(format string, a ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.problems = append(s.problems, fmt.Sprintf(format, a...))
}

// table renders the counts as "Method: OK 12, Unavailable 3 (worst 1.2s)" lines.
func (s *stats) table() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var methods []string
	for m := range s.codes {
		methods = append(methods, m)
	}
	sort.Strings(methods)
	var b strings.Builder
	for _, m := range methods {
		var parts []string
		for c, n := range s.codes[m] {
			parts = append(parts, fmt.Sprintf("%s %d", c, n))
		}
		sort.Strings(parts)
		fmt.Fprintf(&b, "    %-16s %s (worst %v)\n", m, strings.Join(parts, ", "), s.worst[m].Round(time.Millisecond))
	}
	return b.String()
}

// co drives one driver the way a CO does: every RPC with a deadline, and a failed request
// repeated under the same name or ID, with backoff, until it succeeds.
type co struct {
	d       *driver
	st      *stats
	params  map[string]string
	secrets map[string]string
	size    int64
	until   time.Time // give up (and fail) after this: the driver never converged
	mu      sync.Mutex
	ids     map[string]string // request name → the one volume or snapshot ID it may ever get
}

func (c *co) call(method string, fn func(context.Context) error) error {
	ctx, cancel := rpcCtx(deadline)
	defer cancel()
	start := time.Now()
	err := fn(ctx)
	c.st.record(method, err, time.Since(start))
	return err
}

// repeat calls fn until it succeeds, as the CO does.
func (c *co) repeat(method, what string, fn func(context.Context) error) bool {
	backoff := 100 * time.Millisecond
	for {
		err := c.call(method, fn)
		if err == nil {
			return true
		}
		if time.Now().After(c.until) {
			c.st.problem("%s %s never succeeded: last %v", method, what, err)
			return false
		}
		time.Sleep(backoff + rand.N(backoff/2))
		backoff = min(2*backoff, 2*time.Second)
	}
}

// remember records the ID a name got; a name answered with two IDs got two volumes.
func (c *co) remember(name, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev, ok := c.ids[name]; ok && prev != id {
		c.st.problem("name %q got two IDs: %s and %s", name, prev, id)
	}
	c.ids[name] = id
}

func (c *co) createVolume(name string, src *csi.VolumeContentSource) (string, bool) {
	var id string
	req := &csi.CreateVolumeRequest{Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: c.size},
		VolumeCapabilities: []*csi.VolumeCapability{{
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}}},
		Parameters: c.params, Secrets: c.secrets, VolumeContentSource: src}
	ok := c.repeat("CreateVolume", name, func(ctx context.Context) error {
		r, err := c.d.client.CreateVolume(ctx, req)
		id = r.GetVolume().GetVolumeId()
		return err
	})
	if ok {
		c.remember(name, id)
	}
	return id, ok
}

func (c *co) createSnapshot(name, volumeID string) (string, bool) {
	var id string
	ok := c.repeat("CreateSnapshot", name, func(ctx context.Context) error {
		r, err := c.d.client.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: volumeID, Secrets: c.secrets})
		id = r.GetSnapshot().GetSnapshotId()
		return err
	})
	if ok {
		c.remember(name, id)
	}
	return id, ok
}

func (c *co) deleteVolume(id string) bool {
	return c.repeat("DeleteVolume", id, func(ctx context.Context) error {
		_, err := c.d.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id, Secrets: c.secrets})
		return err
	})
}

func (c *co) deleteSnapshot(id string) bool {
	return c.repeat("DeleteSnapshot", id, func(ctx context.Context) error {
		_, err := c.d.client.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: id, Secrets: c.secrets})
		return err
	})
}

func fromSnapshot(id string) *csi.VolumeContentSource {
	return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: id}}}
}

// cycle is one user's PVC life: a volume, sometimes a snapshot and a volume restored from it
// (when clones is set), every create asked twice as a restarted provisioner does, then
// everything deleted again.
func (c *co) cycle(name string, withSnapshot, clones bool) {
	vol, ok := c.createVolume(name, nil)
	if !ok {
		return
	}
	if rand.IntN(3) == 0 {
		c.createVolume(name, nil) // the same answer, or a second volume: remember tells
	}
	if withSnapshot {
		if snap, ok := c.createSnapshot("s-"+name, vol); ok {
			if clones {
				if clone, ok := c.createVolume("c-"+name, fromSnapshot(snap)); ok {
					c.deleteVolume(clone)
				}
			}
			c.deleteSnapshot(snap)
		}
	}
	c.deleteVolume(vol)
}

// load runs workers cycles on c until stop is closed; each finishes its cycle, so that when
// load returns, every volume it created was deleted again (or a problem was recorded).
func (c *co) load(prefix string, workers int, withSnapshot, clones bool, stop <-chan struct{}) {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				c.cycle(fmt.Sprintf("%s-%d-%d", prefix, w, i), withSnapshot && i%2 == 0, clones)
			}
		}()
	}
	wg.Wait()
}

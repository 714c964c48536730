package fence

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	fencepb "github.com/csi-addons/spec/lib/go/fence"
	v1 "github.com/monoceph/monoceph/api/v1"
	"github.com/monoceph/monoceph/internal/blocklist"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/childtest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Integration tests fence documentation ranges (192.0.2.0/24, 198.51.100.0/24, 2001:db8::/32)
// that no client of the local cluster uses, and 127.0.0.2 where enforcement is the point. They
// never fence 127.0.0.1, where the cluster and every other test live: the guard test checks
// that such a fence is refused, without force.

// onCluster is a FenceController on the local cluster, with a direct line to its blocklist for
// checking what the RPCs did.
type onCluster struct {
	clients
	env     cephtest.Cluster
	pool    *ceph.Pool
	secrets map[string]string
}

func newOnCluster(t testing.TB, opts Options) *onCluster {
	return newOnClusterWith(t, opts, nil)
}

// newOnClusterWith lets wrap change what the server sees of the real cluster.
func newOnClusterWith(t testing.TB, opts Options, wrap func(blocklist.Cluster) blocklist.Cluster) *onCluster {
	t.Helper()
	env := cephtest.Env(t)
	pool := ceph.NewPool(ceph.PoolOptions{IdleTTL: time.Minute})
	t.Cleanup(pool.Close)
	connect := blocklist.PoolConnector(pool)
	if wrap != nil {
		real := connect
		connect = func(ctx context.Context, c v1.Cluster, cred ceph.Credentials) (blocklist.Cluster, error) {
			cl, err := real(ctx, c, cred)
			if err != nil {
				return nil, err
			}
			return wrap(cl), nil
		}
	}
	s := newServer(fakeClusters(env.ClusterMap()), connect, opts)
	return &onCluster{clients: serve(t, s), env: env, pool: pool, secrets: env.Secrets()}
}

func (c *onCluster) params(kv ...string) map[string]string {
	m := map[string]string{ClusterIDParameter: c.env.ID}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func (c *onCluster) fence(t testing.TB, cidr ...string) error {
	t.Helper()
	_, err := c.clients.fence.FenceClusterNetwork(context.Background(), &fencepb.FenceClusterNetworkRequest{
		Parameters: c.params(), Secrets: c.secrets, Cidrs: cidrs(cidr...)})
	return err
}

func (c *onCluster) unfence(t testing.TB, cidr ...string) error {
	t.Helper()
	_, err := c.clients.fence.UnfenceClusterNetwork(context.Background(), &fencepb.UnfenceClusterNetworkRequest{
		Parameters: c.params(), Secrets: c.secrets, Cidrs: cidrs(cidr...)})
	return err
}

// listRPC is ListClusterFence's answer.
func (c *onCluster) listRPC(t testing.TB) []string {
	t.Helper()
	resp, err := c.clients.fence.ListClusterFence(context.Background(), &fencepb.ListClusterFenceRequest{Parameters: c.params(), Secrets: c.secrets})
	if err != nil {
		t.Fatalf("ListClusterFence: %v", err)
	}
	var out []string
	for _, c := range resp.GetCidrs() {
		out = append(out, c.GetCidr())
	}
	return out
}

// admin is a connection to the cluster as the admin, past the server.
func (c *onCluster) admin(t testing.TB) *ceph.Conn {
	t.Helper()
	conn, err := c.pool.Get(context.Background(), c.env.Monitors, c.env.Admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	return conn
}

// raw opens the cluster's blocklist directly, as the admin, past the server.
func (c *onCluster) raw(t testing.TB) blocklist.Cluster {
	t.Helper()
	return blocklist.Open(c.admin(t), c.env.Monitors)
}

// rawEntries are the cluster's blocklist entries inside any of the prefixes.
func (c *onCluster) rawEntries(t testing.TB, within ...string) []blocklist.Listed {
	t.Helper()
	all, err := c.raw(t).List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []blocklist.Listed
	for _, l := range all {
		for _, p := range prefixes(within...) {
			if p.Overlaps(l.Prefix) {
				out = append(out, l)
				break
			}
		}
	}
	return out
}

// cleanupEntries removes, at the end of the test whatever happened, every range and
// whole-address entry the test could have created inside the prefixes.
func (c *onCluster) cleanupEntries(t testing.TB, within ...string) {
	t.Cleanup(func() {
		ctx := context.Background()
		raw := c.raw(t)
		all, err := raw.List(ctx)
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		for _, l := range all {
			for _, p := range prefixes(within...) {
				if !l.Instance && p.Overlaps(l.Prefix) {
					if err := raw.Remove(ctx, l.Entry); err != nil {
						t.Errorf("cleanup of %v: %v", l.Entry, err)
					}
					break
				}
			}
		}
	})
}

func TestFenceOnCluster(t *testing.T) {
	c := newOnCluster(t, Options{})
	cidrList := []string{"192.0.2.0/24", "198.51.100.7", "2001:db8::/64", "2001:db8:1::5"}
	canonical := []string{"192.0.2.0/24", "198.51.100.7/32", "2001:db8::/64", "2001:db8:1::5/128"}
	c.cleanupEntries(t, canonical...)
	if err := c.unfence(t, cidrList...); err != nil { // leftovers of an interrupted run
		t.Fatal(err)
	}
	before := c.listRPC(t)
	for _, p := range canonical {
		if slices.Contains(before, p) {
			t.Fatalf("%s listed before fencing: %v", p, before)
		}
	}

	start := time.Now()
	if err := c.fence(t, cidrList...); err != nil {
		t.Fatal(err)
	}
	t.Logf("fenced 4 CIDRs in %v", time.Since(start))
	after := c.listRPC(t)
	for _, p := range canonical {
		if !slices.Contains(after, p) {
			t.Errorf("%s not listed after fencing: %v", p, after)
		}
	}
	entries := c.rawEntries(t, canonical...)
	if len(entries) != len(canonical) {
		t.Fatalf("entries after fencing: %+v", entries)
	}
	for _, e := range entries {
		// one range entry per CIDR, single addresses included, with the five-year expiry
		if !e.Range || !slices.Contains(canonical, e.Prefix.String()) {
			t.Errorf("unexpected entry %+v", e)
		}
		if d := time.Until(e.Until) - blocklist.DefaultExpiry; d < -time.Hour || d > time.Hour {
			t.Errorf("%v expires at %v, not about 5 years from now", e.Prefix, e.Until)
		}
	}

	// fencing again changes nothing, down to the expiry times
	if err := c.fence(t, cidrList...); err != nil {
		t.Fatal(err)
	}
	if again := c.rawEntries(t, canonical...); !slices.EqualFunc(again, entries, func(a, b blocklist.Listed) bool { return a.Entry == b.Entry && a.Until.Equal(b.Until) }) {
		t.Fatalf("second fence changed the entries:\n%+v\n%+v", entries, again)
	}

	if err := c.unfence(t, cidrList...); err != nil {
		t.Fatal(err)
	}
	if left := c.rawEntries(t, canonical...); len(left) != 0 {
		t.Fatalf("entries left after unfencing: %+v", left)
	}
	final := c.listRPC(t)
	for _, p := range canonical {
		if slices.Contains(final, p) {
			t.Errorf("%s still listed after unfencing: %v", p, final)
		}
	}
	if err := c.unfence(t, cidrList...); err != nil {
		t.Fatalf("second unfence: %v", err)
	}
}

func TestFenceExpiryIsConfigurable(t *testing.T) {
	c := newOnCluster(t, Options{Options: blocklist.Options{Expiry: time.Hour}})
	c.cleanupEntries(t, "198.51.100.128/25")
	if err := c.fence(t, "198.51.100.128/25"); err != nil {
		t.Fatal(err)
	}
	entries := c.rawEntries(t, "198.51.100.128/25")
	if len(entries) != 1 {
		t.Fatalf("entries: %+v", entries)
	}
	if d := time.Until(entries[0].Until) - time.Hour; d < -2*time.Minute || d > 2*time.Minute {
		t.Fatalf("expires at %v, want about an hour from now", entries[0].Until)
	}
	if err := c.unfence(t, "198.51.100.128/25"); err != nil {
		t.Fatal(err)
	}
}

// noRanges presents the real cluster as one whose monitors lack range entries.
type noRanges struct{ blocklist.Cluster }

func (noRanges) SupportsRanges(context.Context) (bool, error) { return false, nil }

// The per-address fallback's commands, on real monitors: whole-address entries for every
// address, IPv4 and IPv6, removed again by unfencing.
func TestPerAddressFallbackOnCluster(t *testing.T) {
	c := newOnClusterWith(t, Options{}, func(cl blocklist.Cluster) blocklist.Cluster { return noRanges{cl} })
	if ok, err := c.raw(t).SupportsRanges(context.Background()); err != nil || !ok {
		t.Fatalf("the local cluster should support ranges (Ceph 16.2.15): %v, %v", ok, err)
	}
	within := []string{"192.0.2.252/30", "2001:db8::4/126"}
	c.cleanupEntries(t, within...)
	if err := c.fence(t, "192.0.2.0/23"); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "up to /24") {
		t.Fatalf("fallback beyond its limit: %v", err)
	}
	if err := c.fence(t, within...); err != nil {
		t.Fatal(err)
	}
	entries := c.rawEntries(t, within...)
	var got []string
	for _, e := range entries {
		if e.Range || e.Instance {
			t.Errorf("not a whole-address entry: %+v", e)
		}
		got = append(got, e.Prefix.Addr().String())
	}
	slices.Sort(got)
	want := []string{"192.0.2.252", "192.0.2.253", "192.0.2.254", "192.0.2.255", "2001:db8::4", "2001:db8::5", "2001:db8::6", "2001:db8::7"}
	if !slices.Equal(got, want) {
		t.Fatalf("whole-address entries %v, want %v", got, want)
	}
	listed := c.listRPC(t)
	for _, a := range want {
		if !slices.Contains(listed, addrEntry(a).Prefix.String()) {
			t.Errorf("%s not in ListClusterFence %v", a, listed)
		}
	}
	if err := c.unfence(t, within...); err != nil {
		t.Fatal(err)
	}
	if left := c.rawEntries(t, within...); len(left) != 0 {
		t.Fatalf("left after unfencing: %+v", left)
	}
}

// The local cluster runs every daemon on 127.0.0.1: a fence covering it is refused for each
// of them, this controller, the monitor, the manager and the MDS, read from the cluster's maps.
func TestSelfFencingGuardOnCluster(t *testing.T) {
	c := newOnCluster(t, Options{})
	before := len(c.rawEntries(t, "127.0.0.0/8"))
	for _, cidr := range []string{"127.0.0.0/30", "127.0.0.1", "127.0.0.0/8"} {
		err := c.fence(t, "192.0.2.0/24", cidr)
		if status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("%s: %v; want FAILED_PRECONDITION", cidr, err)
		}
		for _, who := range []string{"this controller's own Ceph client address", "a monitor address", "a manager address", "an MDS address"} {
			if !strings.Contains(err.Error(), "127.0.0.1, "+who) {
				t.Errorf("%s: %v; want it to name 127.0.0.1 as %s", cidr, err, who)
			}
		}
	}
	if after := len(c.rawEntries(t, "127.0.0.0/8", "192.0.2.0/24")); after != before {
		t.Fatalf("refused fences changed the blocklist: %d entries, was %d", after, before)
	}
}

// wellFormedKey is a cephx key no user has: AES type, a creation time, 16 bytes of secret. (A
// malformed one would fail earlier, as EINVAL, before cephx sees it.)
func wellFormedKey() string {
	b := []byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 16, 0}
	b = append(b, []byte("monoceph-no-key!")...)
	return base64.StdEncoding.EncodeToString(b)
}

func TestRejectedCredentials(t *testing.T) {
	c := newOnCluster(t, Options{})
	for name, secrets := range map[string]map[string]string{
		"wrong key":    {ceph.SecretUserID: c.env.Admin.ID, ceph.SecretUserKey: wellFormedKey()},
		"unknown user": {ceph.SecretUserID: "monoceph-nobody", ceph.SecretUserKey: c.env.Admin.Key()},
	} {
		_, err := c.clients.fence.ListClusterFence(context.Background(), &fencepb.ListClusterFenceRequest{Parameters: c.params(), Secrets: secrets})
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s: %v; want UNAUTHENTICATED", name, err)
		}
	}
}

func TestGetFenceClientsOnCluster(t *testing.T) {
	c := newOnCluster(t, Options{ServeFenceClients: true})
	resp, err := c.clients.fence.GetFenceClients(context.Background(), &fencepb.GetFenceClientsRequest{Parameters: c.params(), Secrets: c.secrets})
	if err != nil {
		t.Fatal(err)
	}
	fsid, err := c.raw(t).FSID(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetClients()) != 1 || resp.GetClients()[0].GetId() != fsid || len(resp.GetClients()[0].GetAddresses()) != 1 ||
		resp.GetClients()[0].GetAddresses()[0].GetCidr() != "127.0.0.1/32" {
		t.Fatalf("GetFenceClients = %v; want fsid %s and 127.0.0.1/32", resp, fsid)
	}
}

// The README's least privilege for fencing is enough for every RPC, the guard's daemon
// address reads, the range-support probe and the fence records included.
func TestLeastPrivilegedUser(t *testing.T) {
	c := newOnCluster(t, Options{})
	ctx := context.Background()
	admin := c.admin(t)
	const entity = "client.monoceph-fence-test"
	out, err := ceph.MonCommand(ctx, admin, cephtest.ReadableKey(map[string]any{"prefix": "auth get-or-create", "entity": entity,
		"caps": []string{"mon", blocklist.LeastPrivilegeMonCaps}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := ceph.MonCommand(ctx, admin, map[string]any{"prefix": "auth del", "entity": entity}); err != nil {
			t.Errorf("auth del: %v", err)
		}
	})
	var users []struct {
		Key string `json:"key"`
	}
	if err := json.Unmarshal(out, &users); err != nil || len(users) != 1 {
		t.Fatalf("auth get-or-create: %s: %v", out, err)
	}
	c.secrets = map[string]string{ceph.SecretUserID: strings.TrimPrefix(entity, "client."), ceph.SecretUserKey: users[0].Key}
	c.cleanupEntries(t, "192.0.2.128/25")
	if err := c.fence(t, "192.0.2.128/25"); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(c.listRPC(t), "192.0.2.128/25") {
		t.Fatal("not listed")
	}
	if err := c.unfence(t, "192.0.2.128/25"); err != nil {
		t.Fatal(err)
	}
}

// rawRecords are the cluster's fence records.
func (c *onCluster) rawRecords(t testing.TB) map[netip.Prefix]blocklist.Record {
	t.Helper()
	recs, err := c.raw(t).ListRecords(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// cleanupRecords removes the records of the prefixes at the end of the test.
func (c *onCluster) cleanupRecords(t testing.TB, ps ...string) {
	t.Cleanup(func() {
		for _, p := range prefixes(ps...) {
			if err := c.raw(t).DeleteRecord(context.Background(), p); err != nil {
				t.Errorf("cleanup of the record of %s: %v", p, err)
			}
		}
	})
}

// An operator's own blocklist entries survive an unfence of the same CIDR, on real monitors
// and in the monitors' config-key store: ranges, and whole addresses inside a fallback range.
func TestUnfenceLeavesOthersEntriesOnCluster(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name    string
		ranges  bool
		manual  blocklist.Entry // added by hand first
		cidrs   []string        // fenced and unfenced
		created []blocklist.Entry
	}{
		{name: "range", ranges: true, manual: rangeEntry("198.51.100.64/26"), cidrs: []string{"198.51.100.64/26", "198.51.100.128/26"},
			created: []blocklist.Entry{rangeEntry("198.51.100.128/26")}},
		{name: "address inside a fallback range", manual: addrEntry("198.51.100.5"), cidrs: []string{"198.51.100.4/30"},
			created: []blocklist.Entry{addrEntry("198.51.100.4"), addrEntry("198.51.100.6"), addrEntry("198.51.100.7")}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var wrap func(blocklist.Cluster) blocklist.Cluster
			if !tt.ranges {
				wrap = func(cl blocklist.Cluster) blocklist.Cluster { return noRanges{cl} }
			}
			c := newOnClusterWith(t, Options{}, wrap)
			c.cleanupEntries(t, tt.cidrs...)
			c.cleanupRecords(t, tt.cidrs...)
			raw := c.raw(t)
			if err := raw.Add(ctx, tt.manual, 4*365*24*time.Hour); err != nil { // outlasts half the fence expiry: not renewed
				t.Fatal(err)
			}
			if err := c.fence(t, tt.cidrs...); err != nil {
				t.Fatal(err)
			}
			recs := c.rawRecords(t)
			for _, e := range tt.created {
				if !blocklist.Recorded(recs, e) {
					t.Errorf("%v not recorded", e)
				}
			}
			if blocklist.Recorded(recs, tt.manual) {
				t.Errorf("the manual entry %v was recorded as the fence's", tt.manual)
			}
			if err := c.unfence(t, tt.cidrs...); err != nil {
				t.Fatal(err)
			}
			left := map[blocklist.Entry]bool{}
			for _, l := range c.rawEntries(t, tt.cidrs...) {
				left[l.Entry] = true
			}
			if !left[tt.manual] {
				t.Errorf("the manual entry %v was removed", tt.manual)
			}
			for _, e := range tt.created {
				if left[e] {
					t.Errorf("%v left after the unfence", e)
				}
			}
			for _, p := range prefixes(tt.cidrs...) {
				if _, ok := c.rawRecords(t)[p]; ok {
					t.Errorf("record of %s left", p)
				}
			}
		})
	}
}

const fenceCrashEnv = "MONOCEPH_FENCE_CRASH_OP"

// TestFenceCrashChild is the child side of TestFenceCrashSafety: it runs one fence or unfence
// armed with a fault point, and must die there.
func TestFenceCrashChild(t *testing.T) {
	op, cidr, ok := strings.Cut(os.Getenv(fenceCrashEnv), " ")
	if !ok {
		t.Skip("child process of TestFenceCrashSafety only")
	}
	c := newOnCluster(t, Options{})
	var err error
	if op == "fence" {
		err = c.fence(t, cidr)
	} else {
		err = c.unfence(t, cidr)
	}
	t.Fatalf("child survived its fault point (err %v)", err)
}

// TestFenceCrashSafety kills the controller between recording a fence and adding its entry,
// and between removing an entry and deleting its record: a retry of the same call, or the
// opposite call, leaves neither an entry nor a record behind.
func TestFenceCrashSafety(t *testing.T) {
	const cidr = "203.0.113.0/24"
	c := newOnCluster(t, Options{})
	c.cleanupEntries(t, cidr)
	c.cleanupRecords(t, cidr)
	child := func(op, point string) {
		t.Helper()
		childtest.RunToFaultPoint(t, "TestFenceCrashChild", point, fenceCrashEnv+"="+op+" "+cidr)
	}
	state := func() (entries, records int) {
		_, rec := c.rawRecords(t)[netip.MustParsePrefix(cidr)]
		if rec {
			records = 1
		}
		return len(c.rawEntries(t, cidr)), records
	}
	for _, step := range []struct {
		name            string
		crash, at       string
		entries, recs   int // after the crash
		retry           func() error
		entries2, recs2 int // after the retry
	}{
		{"fence killed after recording, unfenced", "fence", "fence.recorded", 0, 1, func() error { return c.unfence(t, cidr) }, 0, 0},
		{"fence killed after recording, retried", "fence", "fence.recorded", 0, 1, func() error { return c.fence(t, cidr) }, 1, 1},
		{"unfence killed after removing, retried", "unfence", "unfence.removed", 0, 1, func() error { return c.unfence(t, cidr) }, 0, 0},
	} {
		child(step.crash, step.at)
		if e, r := state(); e != step.entries || r != step.recs {
			t.Fatalf("%s: after the crash %d entries, %d records; want %d, %d", step.name, e, r, step.entries, step.recs)
		}
		if err := step.retry(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if e, r := state(); e != step.entries2 || r != step.recs2 {
			t.Fatalf("%s: after the retry %d entries, %d records; want %d, %d", step.name, e, r, step.entries2, step.recs2)
		}
	}
}

// TestFenceWithCephCSISecrets: a NetworkFence of a ceph-csi deployment names its CephFS Secret,
// which holds adminID/adminKey only; monoceph fences with it as with userID/userKey.
func TestFenceWithCephCSISecrets(t *testing.T) {
	c := newOnCluster(t, Options{})
	c.secrets = map[string]string{ceph.SecretAdminID: c.env.Admin.ID, ceph.SecretAdminKey: c.env.Admin.Key()}
	const cidr = "198.51.100.244/30"
	c.cleanupEntries(t, cidr)
	c.cleanupRecords(t, cidr)
	if err := c.fence(t, cidr); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(c.listRPC(t), cidr) {
		t.Fatalf("%s not fenced", cidr)
	}
	if err := c.unfence(t, cidr); err != nil {
		t.Fatal(err)
	}
	if left := c.rawEntries(t, cidr); len(left) != 0 {
		t.Fatalf("left after unfencing: %+v", left)
	}
}

package ceph

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/ceph/go-ceph/rados"
	"github.com/monoceph/monoceph/internal/linger"
	"k8s.io/klog/v2"
)

// Timeouts bound every librados call the driver makes. librados enforces them itself, so a
// call on a hung cluster returns an error even when nobody waits for it any more (see Call).
type Timeouts struct {
	// Connect bounds connecting and authenticating (client_mount_timeout).
	Connect time.Duration
	// Op bounds each OSD and monitor operation (rados_osd_op_timeout, rados_mon_op_timeout).
	Op time.Duration
}

// DefaultTimeouts suit a production cluster: long enough for a monitor election, short enough
// that a CSI sidecar's retry finds the volume lock free again.
var DefaultTimeouts = Timeouts{Connect: 10 * time.Second, Op: 30 * time.Second}

// PoolOptions configure a Pool.
type PoolOptions struct {
	Timeouts Timeouts
	// IdleTTL is how long an unused connection stays open; a connection is a few threads and
	// sockets per cluster user, cheap to keep for the next RPC, wasteful to keep forever.
	IdleTTL time.Duration
	// MaxMgrCommands bounds the manager commands outstanding on one connection (see
	// mgrCommands); 0 means DefaultMaxMgrCommands.
	MaxMgrCommands int
}

// DefaultMaxMgrCommands is PoolOptions.MaxMgrCommands when unset: more than the volumes
// module answers at once, few enough threads to leave behind on a hung manager.
const DefaultMaxMgrCommands = 16

// Pool shares librados connections between RPCs. Connections are keyed by (monitors, user,
// key): the same Secret used by many volumes costs one connection, a rotated key gets a new
// one and the old one expires. Entries are reference counted; an entry is closed only when
// nobody holds it and it has been idle for IdleTTL.
type Pool struct {
	opts PoolOptions

	mu      sync.Mutex
	entries map[string]*entry
	dials   int

	stop chan struct{}
	done chan struct{}
}

type entry struct {
	key     string
	monHost string
	flavor  flavor
	ready   chan struct{} // closed when the connection attempt finished
	conn    *rados.Conn   // set before ready is closed, when err is nil
	err     error
	// mgrSlots holds one token per manager command running on the connection, until librados
	// returns it, whether or not its caller still waits (mgrCommands flavor only)
	mgrSlots chan struct{}

	// guarded by Pool.mu
	refs      int
	idleSince time.Time
	broken    bool
}

// NewPool starts a pool and its idle reaper. Close stops both.
func NewPool(opts PoolOptions) *Pool {
	if opts.Timeouts.Connect <= 0 {
		opts.Timeouts.Connect = DefaultTimeouts.Connect
	}
	if opts.Timeouts.Op <= 0 {
		opts.Timeouts.Op = DefaultTimeouts.Op
	}
	if opts.IdleTTL <= 0 {
		opts.IdleTTL = 5 * time.Minute
	}
	if opts.MaxMgrCommands <= 0 {
		opts.MaxMgrCommands = DefaultMaxMgrCommands
	}
	p := &Pool{opts: opts, entries: map[string]*entry{}, stop: make(chan struct{}), done: make(chan struct{})}
	go p.reap()
	return p
}

// Conn is one holder's share of a pooled connection. Release it when done.
type Conn struct {
	pool *Pool
	e    *entry
	once sync.Once
}

// Rados is the underlying connection. Do not Shutdown it; Release the Conn instead.
func (c *Conn) Rados() *rados.Conn { return c.e.conn }

// mgrOK refuses manager commands on connections that would crash on their timeout.
func (c *Conn) mgrOK() error {
	if c.e.flavor != mgrCommands {
		return NewError("mgr command", ErrInvalid, "manager commands need a connection from Pool.GetForMgr")
	}
	return nil
}

// Release gives the share back. Safe to call more than once.
func (c *Conn) Release() { c.once.Do(func() { c.pool.release(c.e) }) }

// PoolStats describe the pool for tests and metrics.
type PoolStats struct {
	Open  int // connections open or being opened
	InUse int // of those, held by at least one caller
	Dials int // connection attempts since the pool started
}

// Stats reports the pool's current state.
func (p *Pool) Stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := PoolStats{Open: len(p.entries), Dials: p.dials}
	for _, e := range p.entries {
		if e.refs > 0 {
			s.InUse++
		}
	}
	return s
}

// flavor separates connections by what they may carry.
type flavor string

const (
	// general connections carry OSD ops and monitor commands, each bounded by librados'
	// own op timeouts.
	general flavor = "general"
	// mgrCommands connections carry manager commands and run without rados_mon_op_timeout:
	// Pacific's librados returns from a timed-out rados_mgr_command while the manager's late
	// reply is still to be written into the caller's freed buffers, which crashes the process
	// (reproduced here by SIGSTOPping the mgr: segfault on SIGCONT). Call still bounds the
	// caller with the RPC's deadline; the abandoned call finishes when the manager answers,
	// holding a thread until then. So at most PoolOptions.MaxMgrCommands commands run on one
	// connection: on a hung manager further callers wait for a slot until their deadline
	// instead of leaving one more thread behind each.
	mgrCommands flavor = "mgr"
	// data connections carry the I/O of a volume in use (RBD images the node serves through
	// FUSE) and run without rados_osd_op_timeout: like the kernel's RBD client, a write waits
	// for a slow or recovering OSD instead of failing under a filesystem, which would turn it
	// read-only. Connecting and monitor commands stay bounded.
	data flavor = "data"
)

func poolKey(monHost string, cred Credentials, f flavor, crushLocation string) string {
	h := sha256.New()
	for _, s := range []string{monHost, cred.ID, cred.Key(), string(f), crushLocation} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Get returns a connection to the cluster at monHost as cred, opening one if needed. Concurrent
// callers for the same key share one connection attempt. ctx bounds the wait, and the
// connection attempt itself is bounded by Timeouts.Connect.
func (p *Pool) Get(ctx context.Context, monHost string, cred Credentials) (*Conn, error) {
	return p.get(ctx, monHost, cred, general, "")
}

// GetForMgr is Get for a connection that may carry manager commands (see mgrCommands).
func (p *Pool) GetForMgr(ctx context.Context, monHost string, cred Credentials) (*Conn, error) {
	return p.get(ctx, monHost, cred, mgrCommands, "")
}

// GetForData is Get for a connection that carries a volume's I/O (see data).
func (p *Pool) GetForData(ctx context.Context, monHost string, cred Credentials) (*Conn, error) {
	return p.get(ctx, monHost, cred, data, "")
}

// GetForDataAt is GetForData for a client at a CRUSH location (librados' crush_location form,
// "zone=z1 host=n1"): librbd on it reads from the replica nearest to that location
// (rbd_read_from_replica_policy=localize) instead of the primary. The caller checks that the
// cluster allows replica reads (ReplicaReadsAllowed). "" is GetForData.
func (p *Pool) GetForDataAt(ctx context.Context, monHost string, cred Credentials, crushLocation string) (*Conn, error) {
	return p.get(ctx, monHost, cred, data, crushLocation)
}

func (p *Pool) get(ctx context.Context, monHost string, cred Credentials, f flavor, crushLocation string) (*Conn, error) {
	key := poolKey(monHost, cred, f, crushLocation)
	p.mu.Lock()
	if p.entries == nil {
		p.mu.Unlock()
		return nil, NewError("connect", ErrUnavailable, "connection pool is closed")
	}
	e := p.entries[key]
	if e == nil || e.broken {
		e = &entry{key: key, monHost: monHost, flavor: f, ready: make(chan struct{})}
		if f == mgrCommands {
			e.mgrSlots = make(chan struct{}, p.opts.MaxMgrCommands)
		}
		p.entries[key] = e
		p.dials++
		go p.connect(e, monHost, cred, crushLocation)
	}
	e.refs++ // a waiter holds a reference, so the reaper never closes what it is about to get
	p.mu.Unlock()

	select {
	case <-e.ready:
	case <-ctx.Done():
		p.release(e)
		return nil, Wrap("connect to "+monHost+" as client."+cred.ID, ctx.Err())
	}
	if e.err != nil {
		p.release(e)
		return nil, e.err
	}
	return &Conn{pool: p, e: e}, nil
}

func seconds(d time.Duration) string {
	return strconv.Itoa(int(math.Ceil(d.Seconds())))
}

func (p *Pool) connect(e *entry, monHost string, cred Credentials, crushLocation string) {
	op := "connect to " + monHost + " as client." + cred.ID
	conn, err := dial(monHost, cred, p.opts.Timeouts, e.flavor, crushLocation)
	if err != nil {
		if errors.Is(Wrap(op, err), ErrPermission) {
			// cephx refused the user or key: the caller's secret is wrong, not its rights
			err = &Error{Op: op, Errno: Errno(err), Kind: ErrAuth, cause: err,
				Detail: "authentication failed: check the userID and userKey secrets"}
		} else {
			err = Wrap(op, err)
		}
		klog.V(2).InfoS("Ceph connection failed", "monitors", monHost, "user", cred.ID, "err", err)
	} else {
		klog.V(4).InfoS("Ceph connection opened", "monitors", monHost, "user", cred.ID)
	}
	p.mu.Lock()
	e.conn, e.err = conn, err
	if err != nil && p.entries[e.key] == e {
		delete(p.entries, e.key) // the next Get tries again
	}
	e.idleSince = time.Now()
	p.mu.Unlock()
	close(e.ready)
}

func dial(monHost string, cred Credentials, t Timeouts, f flavor, crushLocation string) (*rados.Conn, error) {
	if cred.aes256k && !ReadsAES256KKeys() {
		// librados would fail with "keyring not found" (ENOENT) after printing to stderr
		return nil, NewError("read the key", ErrAuth, "it is an aes256k key (Ceph 20.2.4 and 19.2.6 create these by default), "+
			"which this driver's Ceph libraries cannot read: give client."+cred.ID+" an aes key "+
			"(ceph auth get-or-create ... --key_type aes, where the monitors allow aes) or run monoceph built with Ceph 20.2.4 libraries")
	}
	conn, err := rados.NewConnWithUser(cred.ID)
	if err != nil {
		return nil, err
	}
	opts := [][2]string{
		{"mon_host", monHost},
		{"key", cred.Key()},
		// no keyring files, admin socket or log file: everything comes from the RPC's secrets
		{"keyring", ""},
		{"admin_socket", ""},
		{"log_file", ""},
		{"log_to_stderr", "false"},
		{"err_to_stderr", "false"},
		{"client_mount_timeout", seconds(t.Connect)},
		{"rados_osd_op_timeout", seconds(t.Op)},
		{"rados_mon_op_timeout", seconds(t.Op)},
	}
	switch f {
	case mgrCommands:
		opts[len(opts)-1][1] = "0" // rados_mon_op_timeout
	case data:
		opts[len(opts)-2][1] = "0" // rados_osd_op_timeout
	}
	if crushLocation != "" {
		// read before Connect: the objecter takes the client's location from its context
		opts = append(opts, [2]string{"crush_location", crushLocation}, [2]string{"rbd_read_from_replica_policy", "localize"})
	}
	for _, o := range opts {
		if err := conn.SetConfigOption(o[0], o[1]); err != nil {
			conn.Shutdown()
			// never echo the value: one of them is the key
			return nil, fmt.Errorf("set option %s: %w", o[0], err)
		}
	}
	if err := conn.Connect(); err != nil {
		conn.Shutdown()
		return nil, err
	}
	return conn, nil
}

// ReadsAES256KKeys reports whether this process's librados reads aes256k cephx keys. The
// libraries that do (20.2.4, 19.2.6) came with the monitors' mon_auth_allow_insecure_key
// option, which every release's library knows the name of; older ones answer ENOENT for it.
var ReadsAES256KKeys = sync.OnceValue(func() bool {
	conn, err := rados.NewConn()
	if err != nil {
		return false
	}
	defer conn.Shutdown()
	_, err = conn.GetConfigOption("mon_auth_allow_insecure_key")
	return err == nil
})

func (p *Pool) acquire(e *entry) {
	p.mu.Lock()
	e.refs++
	p.mu.Unlock()
}

func (p *Pool) release(e *entry) {
	var closeIt *rados.Conn
	p.mu.Lock()
	e.refs--
	if e.refs == 0 {
		e.idleSince = time.Now()
		if e.broken && e.conn != nil {
			closeIt = e.conn
			if p.entries[e.key] == e {
				delete(p.entries, e.key)
			}
		}
	}
	p.mu.Unlock()
	if closeIt != nil {
		closeIt.Shutdown()
	}
}

// markBroken retires a connection the cluster shut out (for example a blocklisted client):
// new callers get a fresh one, current holders finish with the old one.
func (p *Pool) markBroken(e *entry) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !e.broken {
		e.broken = true
		if p.entries[e.key] == e {
			delete(p.entries, e.key)
		}
		klog.V(2).InfoS("Ceph connection retired after a shutdown or timeout error")
	}
}

// expire closes connections nobody held for IdleTTL. Exposed to tests through ExpireIdle.
func (p *Pool) expire(now time.Time) int {
	var victims []*rados.Conn
	p.mu.Lock()
	for k, e := range p.entries {
		select {
		case <-e.ready:
		default:
			continue // still connecting
		}
		if e.refs == 0 && now.Sub(e.idleSince) >= p.opts.IdleTTL {
			delete(p.entries, k)
			if e.conn != nil {
				victims = append(victims, e.conn)
			}
		}
	}
	p.mu.Unlock()
	for _, c := range victims {
		c.Shutdown()
	}
	return len(victims)
}

// ExpireIdle closes idle connections now, as the reaper would, and reports how many it closed.
func (p *Pool) ExpireIdle() int { return p.expire(time.Now()) }

func (p *Pool) reap() {
	defer close(p.done)
	interval := p.opts.IdleTTL / 2
	if interval < time.Second {
		interval = time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case now := <-t.C:
			if n := p.expire(now); n > 0 {
				klog.V(4).InfoS("Closed idle Ceph connections", "count", n)
			}
		}
	}
}

// Close stops the reaper and closes every idle connection. Connections still held are closed
// when their last holder releases them.
func (p *Pool) Close() {
	select {
	case <-p.stop:
		return
	default:
	}
	close(p.stop)
	<-p.done
	p.mu.Lock()
	entries := p.entries
	p.entries = nil
	var victims []*rados.Conn
	for _, e := range entries {
		e.broken = true
		select {
		case <-e.ready:
			if e.refs == 0 && e.conn != nil {
				victims = append(victims, e.conn)
			}
		default:
		}
	}
	p.mu.Unlock()
	for _, c := range victims {
		c.Shutdown()
	}
}

// Call runs fn, a blocking librados call on c, and returns when fn returns or ctx ends,
// whichever is first. When ctx ends first, fn keeps running in the background until librados'
// own timeouts stop it; it holds its own reference so the connection stays open under it, and
// keeps the caller's operation lock (see package linger) so a retry gets ABORTED instead of
// running beside it. This is what keeps a hung cluster from wedging a caller forever without
// letting two calls on one volume overlap.
func Call[T any](ctx context.Context, c *Conn, op string, fn func(*rados.Conn) (T, error)) (T, error) {
	return call(ctx, c, op, nil, fn)
}

// callMgr is Call for a manager command: it runs only once one of the connection's manager
// command slots is free (see mgrCommands), and holds it until librados returns.
func callMgr[T any](ctx context.Context, c *Conn, op string, fn func(*rados.Conn) (T, error)) (T, error) {
	if err := c.mgrOK(); err != nil {
		var zero T
		return zero, err
	}
	return call(ctx, c, op, c.e.mgrSlots, fn)
}

func call[T any](ctx context.Context, c *Conn, op string, slots chan struct{}, fn func(*rados.Conn) (T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, Wrap(op, err)
	}
	if slots != nil {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return zero, WrapDetail(op, ctx.Err(), fmt.Sprintf("all %d manager commands this connection may run are still waiting for the manager", cap(slots)))
		}
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	c.pool.acquire(c.e)
	// taken now, dropped when fn ends: if ctx ends first, fn goes on holding the caller's
	// operation lock (package linger), so a retry cannot race it
	held := sync.OnceFunc(linger.Hold(ctx))
	go func() {
		v, err := fn(c.e.conn)
		if err != nil && retire(Wrap(op, err)) {
			// also when the caller gave up on it already: the next RPC must not get this
			// connection
			c.pool.markBroken(c.e)
		}
		// all before the result is handed over: a caller that has its answer must find the
		// operation lock (and the manager command slot) free for its next request
		if slots != nil {
			<-slots
		}
		held()
		c.pool.release(c.e)
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return r.v, Wrap(op, r.err)
		}
		return r.v, nil
	case <-ctx.Done():
		// a reply librados lost (a manager command has no op timeout) must not keep the
		// volume's lock forever
		time.AfterFunc(MaxLinger, func() {
			select {
			case <-ch:
			default:
				klog.FromContext(ctx).Info("Ceph call still running; releasing its operation lock", "op", op, "after", MaxLinger)
			}
			held()
		})
		return zero, Wrap(op, ctx.Err())
	}
}

// retire reports whether err means the connection cannot be trusted with another call:
//   - ESHUTDOWN: the cluster shut this client out (blocklisted);
//   - ETIMEDOUT from rados_osd_op_timeout or rados_mon_op_timeout: once an OSD operation
//     timed out against an OSD that stopped answering, librados 16.2 never recovers that
//     client, even after the OSD is back (seen in the fault-injection suite: every later
//     operation of the connection timed out for minutes, while a new connection worked at
//     once). A new connection costs one monitor handshake.
func retire(err error) bool {
	switch Errno(err) {
	case -int(syscall.ESHUTDOWN), -int(syscall.ETIMEDOUT):
		return true
	}
	return false
}

// MaxLinger bounds how long a call abandoned at its caller's deadline keeps the caller's
// operation lock. librados' per-operation timeouts normally end it much sooner.
const MaxLinger = 10 * time.Minute

package kube

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/monoceph/monoceph/internal/cephfs/mount"
	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/rbd/attachment"
	corev1 "k8s.io/api/core/v1"
)

// intruderIP is the address of a Ceph client on no Node of the cluster.
const intruderIP = "127.0.0.4"

// intruder is a Ceph client that is not monoceph's, on an address of no Node, with a Ceph user
// of its own, whose CephFS session announces the hostname and node ID of node A's: what a
// client of another Kubernetes cluster with the same node names sends, or a forged one.
// Fencing node A must leave it alone (issue 26, items 2 and 3).
type intruder struct {
	mnt     string
	session int64 // its MDS session
	cmd     *exec.Cmd
	exited  chan error
}

const intruderUser = "e2e-intruder"

// mdsSession is an entry of `ceph tell mds.<fs>:0 client ls`.
type mdsSession struct {
	ID   int64          `json:"id"`
	Inst string         `json:"inst"` // "client.<id> v1:<addr>:0/<nonce>"
	Meta map[string]any `json:"client_metadata"`
}

func (s mdsSession) meta(k string) string { v, _ := s.Meta[k].(string); return v }

// mdsSessions lists the sessions of the filesystem's rank 0.
func (e *env) mdsSessions() []mdsSession {
	e.t.Helper()
	out, err := e.cephCmdWithin(30*time.Second, nil, "ceph", "tell", "mds."+e.ceph.FSName+":0", "client", "ls", "--format=json")
	if err != nil {
		e.t.Fatal(err)
	}
	var ss []mdsSession
	if err := json.Unmarshal([]byte(out), &ss); err != nil {
		e.t.Fatalf("client ls: %v: %s", err, out)
	}
	return ss
}

// nodeSession is the CephFS session node n's plugin made (the one announcing its node ID).
func (e *env) nodeSession(n *node) mdsSession {
	e.t.Helper()
	var found []mdsSession
	for _, s := range e.mdsSessions() {
		if s.meta(mount.NodeMetadataKey) == n.name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		e.t.Fatalf("CephFS sessions of node %s: %+v; want one", n.name, found)
	}
	return found[0]
}

// startIntruder mounts the filesystem's root with ceph-fuse from intruderIP as its own Ceph
// user, announcing what lost's session announces. The mount and the user go when the test ends.
func (e *env) startIntruder(lost mdsSession) *intruder {
	e.t.Helper()
	keyring, err := e.cephCmd("ceph", "fs", "authorize", e.ceph.FSName, "client."+intruderUser, "/", "rw")
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _, _ = e.cephCmd("ceph", "auth", "rm", "client."+intruderUser) })
	dir := e.t.TempDir()
	keyFile := filepath.Join(dir, "keyring")
	if err := os.WriteFile(keyFile, []byte(keyring), 0o600); err != nil {
		e.t.Fatal(err)
	}
	in := &intruder{mnt: filepath.Join(dir, "mnt"), exited: make(chan error, 1)}
	if err := os.Mkdir(in.mnt, 0o755); err != nil {
		e.t.Fatal(err)
	}
	in.cmd = exec.Command("ceph-fuse", "-f", "--id", intruderUser, "--keyring", keyFile, "--client_fs", e.ceph.FSName,
		"--client_metadata", fmt.Sprintf("hostname=%s,%s=%s", lost.meta("hostname"), mount.NodeMetadataKey, lost.meta(mount.NodeMetadataKey)),
		in.mnt)
	in.cmd.Env = append(os.Environ(), cephtest.BindSrcEnv(e.t, intruderIP)...)
	log, err := os.Create(filepath.Join(dir, "ceph-fuse.log"))
	if err != nil {
		e.t.Fatal(err)
	}
	in.cmd.Stdout, in.cmd.Stderr = log, log
	if err := in.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() { in.exited <- in.cmd.Wait(); log.Close() }()
	e.t.Cleanup(func() { in.stop() })
	e.waitFor(time.Minute, "the intruder's CephFS session", func() (bool, string) {
		select {
		case err := <-in.exited:
			b, _ := os.ReadFile(log.Name())
			e.t.Fatalf("the intruder's ceph-fuse exited: %v: %s", err, b)
		default:
		}
		for _, s := range e.mdsSessions() {
			if s.meta("entity_id") == intruderUser {
				in.session = s.ID
				return strings.Contains(s.Inst, intruderIP+":"), fmt.Sprintf("session %+v", s)
			}
		}
		return false, "no session yet"
	})
	for _, k := range []string{"hostname", mount.NodeMetadataKey} {
		if s := e.sessionByID(in.session); s.meta(k) != lost.meta(k) {
			e.t.Fatalf("the intruder's session announces %s=%q, want %q (as %s's does)", k, s.meta(k), lost.meta(k), lost.meta(mount.NodeMetadataKey))
		}
	}
	in.write(e, "before-taint")
	return in
}

func (e *env) sessionByID(id int64) mdsSession {
	e.t.Helper()
	for _, s := range e.mdsSessions() {
		if s.ID == id {
			return s
		}
	}
	return mdsSession{}
}

// write writes and syncs a file in the intruder's mount, bounded: a fenced client would hang.
func (in *intruder) write(e *env, name string) {
	e.t.Helper()
	done := make(chan error, 1)
	go func() { done <- os.WriteFile(filepath.Join(in.mnt, name), []byte(name), 0o644) }()
	select {
	case err := <-done:
		if err != nil {
			e.t.Fatalf("the intruder's write of %s: %v", name, err)
		}
	case <-time.After(30 * time.Second):
		e.t.Fatalf("the intruder's write of %s still waits after 30 s", name)
	}
}

// stop unmounts, which ends ceph-fuse with its session closed (killed, it would leave a
// session the MDS evicts and blocklists after the session timeout, an entry later tests see);
// a mount that does not go is detached and its ceph-fuse killed.
func (in *intruder) stop() {
	if syscall.Unmount(in.mnt, 0) == nil {
		select {
		case <-in.exited:
			return
		case <-time.After(30 * time.Second):
		}
	}
	_ = syscall.Unmount(in.mnt, syscall.MNT_DETACH)
	_ = in.cmd.Process.Kill()
	select {
	case <-in.exited:
	case <-time.After(30 * time.Second):
	}
}

// plantAddrs records addrs as node n's client addresses in pv's attachment object, as a root
// user of n can (the node-stage key writes any object of the pool).
func (e *env) plantAddrs(pv *corev1.PersistentVolume, n *node, addrs ...string) {
	e.t.Helper()
	key, _ := attachment.Key(pv.Spec.CSI.VolumeHandle)
	v, err := json.Marshal(map[string]any{"addrs": addrs, "at": time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.cephCmd("rados", "-p", e.ceph.RBDPool, "--namespace", pv.Spec.CSI.VolumeAttributes["radosNamespace"],
		"setomapval", attachment.ObjectName(key), "client."+n.name, string(v)); err != nil {
		e.t.Fatal(err)
	}
}

// blocklistOf is the blocklist's entries for ip (clients and ranges), sorted, from `ceph osd
// blocklist ls` output.
func blocklistOf(out, ip string) []string {
	entries := slices.DeleteFunc(blocklistEntries(out), func(e string) bool { return !strings.HasPrefix(e, ip+":") })
	slices.Sort(entries)
	return entries
}

// eventMessages are the messages of the events of reason on the object called name.
func (e *env) eventMessages(name, reason string) []string {
	e.t.Helper()
	var out []string
	for _, ev := range e.eventsList(name, reason) {
		out = append(out, ev.Message)
	}
	return out
}

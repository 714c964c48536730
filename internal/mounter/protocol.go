package mounter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/monoceph/monoceph/internal/ceph"
	cephfsmount "github.com/monoceph/monoceph/internal/cephfs/mount"
	"github.com/monoceph/monoceph/internal/fusefile"
	"github.com/monoceph/monoceph/internal/rbd/attach"
	"golang.org/x/sys/unix"
)

// Version is the protocol version this package speaks.
const Version = 1

// Features a holder announces in its hello, beyond what protocol version 1 began with. The
// protocol's JSON is read leniently, so a holder without a feature ignores the fields asking
// for it and still answers: a node plugin learns from the hello what it gets.
const (
	// FeatureCephFSNode: cephfs.mount carries the node, which ceph-fuse announces in its MDS
	// session metadata (mount.NodeMetadataKey), where out-of-service fencing finds the node's
	// sessions. Without it a lost node's CephFS clients are found by hostname only.
	FeatureCephFSNode = "cephfs.node"
	// FeatureRBDEncryption: rbd.attach carries the key of an encrypted image and the holder
	// loads it (and hands it back, see rbdAttached). An older holder would ignore the key and
	// serve the image's ciphertext, so encrypted volumes are never attached through one.
	FeatureRBDEncryption = "rbd.encryption"
)

// features are what this holder does.
var features = []string{FeatureCephFSNode, FeatureRBDEncryption}

// Operations.
const (
	opHello          = "hello"
	opWatch          = "watch"
	opRBDAttach      = "rbd.attach"
	opRBDDetach      = "rbd.detach"
	opCephFSMount    = "cephfs.mount"
	opCephFSRelease  = "cephfs.release"
	opCephFSRunning  = "cephfs.running"
	maxMessage       = 64 << 10
	defaultOpTimeout = 2 * time.Minute
)

// request is one operation. Body is the operation's own message.
type request struct {
	Op string `json:"op"`
	// Timeout is what is left of the caller's deadline: the holder gives up then too.
	Timeout time.Duration   `json:"timeout,omitempty"`
	Body    json.RawMessage `json:"body,omitempty"`
}

// reply answers a request: an error or the operation's answer.
type reply struct {
	Err  *wireError      `json:"error,omitempty"`
	Body json.RawMessage `json:"body,omitempty"`
}

// hello is the holder's answer to opHello and opWatch: which holder this is.
type hello struct {
	Version  int    `json:"version"`
	Instance string `json:"instance"`
	Type     string `json:"type"`
	Binary   string `json:"binary"` // the holder's own version
	PID      int    `json:"pid"`
	// Features the holder has (Feature*); a holder older than them sends none.
	Features []string `json:"features,omitempty"`
}

// credentials carry a Ceph user and its key. The key is a secret: it is never logged.
type credentials struct {
	UserID  string `json:"userID"`
	UserKey string `json:"userKey"`
}

func wireCred(c ceph.Credentials) credentials { return credentials{UserID: c.ID, UserKey: c.Key()} }

func (c credentials) ceph() (ceph.Credentials, error) {
	return ceph.NewCredentials(c.UserID, c.UserKey)
}

// rbdAttach asks for an image to be attached; a descriptor passed along is the connection to
// resume, described by Resume.
type rbdAttach struct {
	Image    attach.Image    `json:"image"`
	MonHost  string          `json:"monHost"`
	Cred     credentials     `json:"credentials"`
	ReadOnly bool            `json:"readOnly"`
	WorkDir  string          `json:"workDir"`
	Resume   *fusefile.State `json:"resume,omitempty"`
	KeepOnly bool            `json:"keepOnly,omitempty"`
	// CrushLocation: see attach.Request
	CrushLocation string `json:"crushLocation,omitempty"`
	// Encryption opens an encrypted image: key material, in this message only (never logged).
	Encryption *attach.Encryption `json:"encryption,omitempty"`
}

// rbdAttached answers rbdAttach: the attachment, and the key of an encrypted image, which the
// node plugin keeps in memory with the connection (a restarted plugin learns it here) and hands
// to the next holder that resumes the connection. An older node plugin reads the attachment
// alone.
type rbdAttached struct {
	attach.Attachment
	Encryption *attach.Encryption `json:"encryption,omitempty"`
}

// rbdDetach asks for an attachment to be undone; a descriptor passed along is its kept
// connection, described by Resume.
type rbdDetach struct {
	Attachment attach.Attachment `json:"attachment"`
	Resume     *fusefile.State   `json:"resume,omitempty"`
}

// cephfsMount is a cephfs mount.Request on the wire.
type cephfsMount struct {
	Monitors []string    `json:"monitors"`
	FSName   string      `json:"fsName"`
	Path     string      `json:"path"`
	Target   string      `json:"target"`
	ReadOnly bool        `json:"readOnly"`
	Options  []string    `json:"options,omitempty"`
	Cred     credentials `json:"credentials"`
	WorkDir  string      `json:"workDir"`
	// Node is announced by ceph-fuse (FeatureCephFSNode; an older holder ignores it).
	Node string `json:"node,omitempty"`
}

type workDirBody struct {
	WorkDir string `json:"workDir"`
}

type running struct {
	Running bool `json:"running"`
}

// wireError carries an error across: its message, and what callers classify it by.
type wireError struct {
	Message string `json:"message"`
	// Kinds names the sentinel errors (kinds) the error is.
	Kinds []string `json:"kinds,omitempty"`
	// Unavailable: an attach.UnavailableError or a mount.UnavailableError (Mounter, Missing).
	Unavailable *unavailable `json:"unavailable,omitempty"`
	// Unhealthy is an attach.Unhealthy's reason.
	Unhealthy string `json:"unhealthy,omitempty"`
}

type unavailable struct {
	Mounter string `json:"mounter"`
	Missing string `json:"missing"`
}

// kinds are the sentinel errors callers classify errors by (errors.Is), by name: the node
// path's own, then every Ceph class as "ceph-<class>" (names both sides of a holder upgrade
// know; a name the other side lacks is ignored there).
var kinds = append([]kind{
	{"deadline", context.DeadlineExceeded},
	{"canceled", context.Canceled},
	{"image-not-found", attach.ErrImageNotFound},
	{"connection-lost", attach.ErrConnectionLost},
	{"wrong-key", attach.ErrWrongKey},
	{"no-key", attach.ErrNoKey},
	{"holder-unavailable", ErrUnavailable},
}, cephKinds()...)

type kind struct {
	name string
	err  error
}

func cephKinds() []kind {
	out := make([]kind, len(ceph.Classes))
	for i, c := range ceph.Classes {
		out[i] = kind{"ceph-" + c.Name, c.Err}
	}
	return out
}

// ErrUnavailable: the holder cannot be reached (not running, restarting). It is a
// ceph.ErrUnavailable, so node services answer UNAVAILABLE and the CO retries.
var ErrUnavailable = fmt.Errorf("the mount holder is not available (%w)", ceph.ErrUnavailable)

func encodeError(err error) *wireError {
	if err == nil {
		return nil
	}
	w := &wireError{Message: err.Error()}
	for _, k := range kinds {
		if errors.Is(err, k.err) {
			w.Kinds = append(w.Kinds, k.name)
		}
	}
	var ua *attach.UnavailableError
	var um *cephfsmount.UnavailableError
	var u *attach.Unhealthy
	switch {
	case errors.As(err, &ua):
		w.Unavailable = &unavailable{Mounter: ua.Mounter, Missing: ua.Missing}
	case errors.As(err, &um):
		w.Unavailable = &unavailable{Mounter: um.Mounter, Missing: um.Reason}
	case errors.As(err, &u):
		w.Unhealthy = u.Reason
	}
	return w
}

// RemoteError is an error the holder answered with. It is (errors.Is) the kinds the holder's
// error was, so callers classify it as they would have the holder's own.
type RemoteError struct {
	Message string
	kinds   []error
}

func (e *RemoteError) Error() string   { return e.Message }
func (e *RemoteError) Unwrap() []error { return e.kinds }

// decodeError rebuilds an error of the holder; rbd says which mounter types to rebuild.
func decodeError(w *wireError, rbd bool) error {
	if w == nil {
		return nil
	}
	re := &RemoteError{Message: w.Message}
	for _, name := range w.Kinds {
		for _, k := range kinds {
			if k.name == name {
				re.kinds = append(re.kinds, k.err)
			}
		}
	}
	switch {
	case w.Unavailable != nil && rbd:
		return &attach.UnavailableError{Mounter: w.Unavailable.Mounter, Missing: w.Unavailable.Missing}
	case w.Unavailable != nil:
		return &cephfsmount.UnavailableError{Mounter: w.Unavailable.Mounter, Reason: w.Unavailable.Missing}
	case w.Unhealthy != "":
		return &attach.Unhealthy{Reason: w.Unhealthy, Err: re}
	}
	return re
}

// send writes one message with the descriptors of files.
func send(c *net.UnixConn, v any, files ...*os.File) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b) > maxMessage {
		return fmt.Errorf("message of %d bytes, more than %d", len(b), maxMessage)
	}
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	_, _, err = c.WriteMsgUnix(b, oob, nil)
	return err
}

// recv reads one message into v and returns the descriptors that came with it (close-on-exec:
// they never leak into the commands this process runs).
func recv(c *net.UnixConn, v any) ([]*os.File, error) {
	buf := make([]byte, maxMessage)
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, err
	}
	files, ferr := rights(oob[:oobn])
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		closeAll(files)
		return nil, errors.New("message truncated")
	}
	if n == 0 {
		closeAll(files)
		return nil, errClosed
	}
	if ferr != nil {
		return nil, ferr
	}
	if err := json.Unmarshal(buf[:n], v); err != nil {
		closeAll(files)
		return nil, err
	}
	return files, nil
}

// errClosed: the peer closed the connection (a zero-length read of a packet socket).
var errClosed = errors.New("connection closed")

func rights(oob []byte) ([]*os.File, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			files = append(files, os.NewFile(uintptr(fd), "/dev/fuse"))
		}
	}
	return files, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

package mounter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/monoceph/monoceph/internal/endpoint"
	"github.com/monoceph/monoceph/internal/fusefile"
	"github.com/monoceph/monoceph/internal/rbd/attach"
	"k8s.io/klog/v2"
)

// Client talks to the holder at a socket, and keeps the FUSE connections of the RBD images
// the holder serves (custody): while the holder restarts they stay open here, and the next
// attach of each volume hands its connection to the new holder.
type Client struct {
	path string

	mu      sync.Mutex
	custody map[string]*attach.Connection // by work directory
}

// NewClient returns a client of the holder at the endpoint ep (unix://...).
func NewClient(ep string) (*Client, error) {
	path, err := endpoint.SocketPath(ep)
	if err != nil {
		return nil, err
	}
	return &Client{path: path, custody: map[string]*attach.Connection{}}, nil
}

// Path is the holder's socket.
func (c *Client) Path() string { return c.path }

// dial connects to the holder; a holder that is not there is ErrUnavailable.
func (c *Client) dial(ctx context.Context) (*net.UnixConn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unixpacket", c.path)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrUnavailable, c.path, err)
	}
	return conn.(*net.UnixConn), nil
}

// call sends one request (with file, when not nil) and decodes the answer into out; it returns
// the descriptor that came with the answer, if any. rbd says which error types to rebuild.
func (c *Client) call(ctx context.Context, op string, body any, file *os.File, out any, rbd bool) (*os.File, error) {
	conn, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	req := request{Op: op}
	if dl, ok := ctx.Deadline(); ok {
		req.Timeout = time.Until(dl)
	}
	if body != nil {
		if req.Body, err = json.Marshal(body); err != nil {
			return nil, err
		}
	}
	var files []*os.File
	if file != nil {
		files = append(files, file)
	}
	if err := send(conn, req, files...); err != nil {
		return nil, c.lost(ctx, op, err)
	}
	var rep reply
	got, err := recv(conn, &rep)
	if err != nil {
		return nil, c.lost(ctx, op, err)
	}
	if rep.Err != nil {
		closeAll(got)
		return nil, decodeError(rep.Err, rbd)
	}
	if out != nil && rep.Body != nil {
		if err := json.Unmarshal(rep.Body, out); err != nil {
			closeAll(got)
			return nil, err
		}
	}
	if len(got) == 0 {
		return nil, nil
	}
	closeAll(got[1:])
	return got[0], nil
}

// lost is the error of a request whose connection broke: the caller's deadline, or the holder
// went away mid-request (it may or may not have done it; every operation is idempotent).
func (c *Client) lost(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("mount holder %s: %w", op, ctx.Err())
	}
	return fmt.Errorf("%w: %s: %v", ErrUnavailable, op, err)
}

// Hello asks the holder who it is.
func (c *Client) Hello(ctx context.Context) (Info, error) {
	var h hello
	_, err := c.call(ctx, opHello, nil, nil, &h, false)
	return Info(h), err
}

// Info identifies a running holder.
type Info struct {
	Version  int
	Instance string
	Type     string
	Binary   string
	PID      int
	Features []string
}

// Missing are the features a node plugin of driver type typ ("rbd", "cephfs") relies on that
// this holder lacks (an older holder).
func (i Info) Missing(typ string) []string {
	var out []string
	if typ == "cephfs" && !slices.Contains(i.Features, FeatureCephFSNode) {
		out = append(out, FeatureCephFSNode)
	}
	return out
}

// Watch follows the holder: it calls onNew (in the background, with a context that ends when
// the next holder is seen or Watch returns) each time it finds a holder it has not seen
// before, the first one included, until ctx ends. A restart is noticed the moment the
// holder's end of the watch connection closes; the next holder is looked for every
// retryInterval.
func (c *Client) Watch(ctx context.Context, onNew func(ctx context.Context, h Info)) {
	log := klog.FromContext(ctx).WithValues("holder", c.path)
	var last string
	var down time.Time
	cancelPrev := context.CancelFunc(func() {})
	defer func() { cancelPrev() }()
	for ctx.Err() == nil {
		h, wait, err := c.watchOnce(ctx)
		if err == nil && h.Instance != last {
			if last != "" {
				log.Info("A new mount holder is serving", "instance", h.Instance, "version", h.Binary, "pid", h.PID,
					"downFor", time.Since(down).Round(time.Millisecond))
			}
			last = h.Instance
			cancelPrev()
			hctx, cancel := context.WithCancel(ctx)
			cancelPrev = cancel
			go onNew(hctx, Info(h))
		}
		if err == nil {
			wait() // until the holder closes the connection
			down = time.Now()
			log.Info("The mount holder went away", "instance", h.Instance)
		}
		select {
		case <-ctx.Done():
		case <-time.After(retryInterval):
		}
	}
}

// retryInterval paces the search for a holder while none answers.
const retryInterval = 100 * time.Millisecond

// watchOnce opens a watch; wait returns when the holder closes it (or ctx ends).
func (c *Client) watchOnce(ctx context.Context) (hello, func(), error) {
	conn, err := c.dial(ctx)
	if err != nil {
		return hello{}, nil, err
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	if err := send(conn, request{Op: opWatch}); err != nil {
		stop()
		conn.Close()
		return hello{}, nil, err
	}
	var rep reply
	var h hello
	if _, err := recv(conn, &rep); err != nil {
		stop()
		conn.Close()
		return hello{}, nil, err
	}
	if err := json.Unmarshal(rep.Body, &h); err != nil || rep.Err != nil {
		stop()
		conn.Close()
		return hello{}, nil, errors.Join(err, decodeError(rep.Err, false))
	}
	return h, func() {
		defer conn.Close()
		defer stop()
		var buf [1]byte
		_, _ = conn.Read(buf[:])
	}, nil
}

// keep takes custody of conn for the volume of workDir (closing one it replaces).
func (c *Client) keep(workDir string, file *os.File, state *fusefile.State, enc *attach.Encryption) {
	if file == nil || state == nil {
		if file != nil {
			file.Close()
		}
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.custody[workDir]; old != nil {
		old.File.Close()
	}
	c.custody[workDir] = &attach.Connection{File: file, State: *state, Encryption: enc}
}

// kept is the connection in custody for workDir, or nil.
func (c *Client) kept(workDir string) *attach.Connection {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.custody[workDir]
}

// release gives up custody of workDir's connection (its volume was detached).
func (c *Client) release(workDir string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.custody[workDir]; old != nil {
		old.File.Close()
		delete(c.custody, workDir)
	}
}

// Kept is the number of connections in custody.
func (c *Client) Kept() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.custody)
}

// fileOf is the connection's descriptor, or nil without a connection.
func fileOf(conn *attach.Connection) *os.File {
	if conn == nil {
		return nil
	}
	return conn.File
}

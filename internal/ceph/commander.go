package ceph

import (
	"context"

	"github.com/ceph/go-ceph/rados"
)

// Commander lets go-ceph's admin packages (cephfs/admin and friends) run their mon and mgr
// commands on a pooled connection, each bounded by ctx through Call.
type Commander struct {
	ctx  context.Context
	conn *Conn
}

// NewCommander binds conn to ctx for one RPC's administrative commands. conn must come from
// Pool.GetForMgr when manager commands go through it (see mgrCommands).
func NewCommander(ctx context.Context, conn *Conn) Commander { return Commander{ctx: ctx, conn: conn} }

type commandResult struct {
	buf    []byte
	status string
}

// MgrCommand implements go-ceph's MgrCommander.
func (c Commander) MgrCommand(args [][]byte) ([]byte, string, error) {
	r, err := callMgr(c.ctx, c.conn, "mgr command", func(r *rados.Conn) (commandResult, error) {
		b, s, err := r.MgrCommand(args)
		return commandResult{b, s}, err
	})
	return r.buf, r.status, err
}

// MonCommand implements go-ceph's MonCommander.
func (c Commander) MonCommand(args []byte) ([]byte, string, error) {
	r, err := Call(c.ctx, c.conn, "mon command", func(r *rados.Conn) (commandResult, error) {
		b, s, err := r.MonCommand(args)
		return commandResult{b, s}, err
	})
	return r.buf, r.status, err
}

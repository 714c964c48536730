package ceph

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/ceph/go-ceph/rados"
)

// sender hands one encoded command to librados: the monitors or the active manager.
type sender struct {
	send func(*rados.Conn, []byte) ([]byte, string, error)
	mgr  bool // runs in one of the connection's manager command slots
}

var (
	sendMon = sender{send: func(r *rados.Conn, b []byte) ([]byte, string, error) { return r.MonCommand(b) }}
	sendMgr = sender{send: func(r *rados.Conn, b []byte) ([]byte, string, error) { return r.MgrCommand([][]byte{b}) }, mgr: true}
)

// MonCommand sends one JSON command to the monitors and returns its output. Ceph's status text
// becomes part of the error, since it carries the reason (e.g. "pool 'x' does not exist").
func MonCommand(ctx context.Context, c *Conn, cmd map[string]any) ([]byte, error) {
	op, body, err := encode(cmd)
	if err != nil {
		return nil, err
	}
	return command(ctx, c, op, body, sendMon)
}

// MonCommandRaw is MonCommand for a body the caller encoded itself, for arguments
// encoding/json cannot express: a CephFloat argument must be a JSON float literal (600.0),
// and json.Marshal writes 600, which the monitors reject ("bad or missing field"). op names
// the command in errors.
func MonCommandRaw(ctx context.Context, c *Conn, op string, body []byte) ([]byte, error) {
	return command(ctx, c, op, body, sendMon)
}

// MgrCommand sends one JSON command to the active manager (for example the volumes module).
// c must come from Pool.GetForMgr.
func MgrCommand(ctx context.Context, c *Conn, cmd map[string]any) ([]byte, error) {
	op, body, err := encode(cmd)
	if err != nil {
		return nil, err
	}
	return command(ctx, c, op, body, sendMgr)
}

// encode asks for JSON output unless the command says otherwise, and names the command by its
// prefix for errors.
func encode(cmd map[string]any) (string, []byte, error) {
	if _, ok := cmd["format"]; !ok {
		cmd["format"] = "json"
	}
	body, err := json.Marshal(cmd)
	if err != nil {
		return "", nil, fmt.Errorf("encode command: %w", err)
	}
	return fmt.Sprint(cmd["prefix"]), body, nil
}

func command(ctx context.Context, c *Conn, op string, body []byte, send sender) ([]byte, error) {
	type out struct {
		buf    []byte
		status string
	}
	run := Call[out]
	if send.mgr {
		run = callMgr[out]
	}
	res, err := run(ctx, c, op, func(r *rados.Conn) (out, error) {
		buf, status, err := send.send(r, body)
		return out{buf, status}, err
	})
	if err != nil {
		return nil, WrapDetail(op, err, strings.TrimSpace(res.status))
	}
	return res.buf, nil
}

package ceph

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/ceph/go-ceph/rados"
)

// MonCommand sends one JSON command to the monitors and returns its output. Ceph's status text
// becomes part of the error, since it carries the reason (e.g. "pool 'x' does not exist").
func MonCommand(ctx context.Context, c *Conn, cmd map[string]any) ([]byte, error) {
	return command(ctx, c, cmd, func(r *rados.Conn, b []byte) ([]byte, string, error) { return r.MonCommand(b) })
}

// MgrCommand sends one JSON command to the active manager (for example the volumes module).
func MgrCommand(ctx context.Context, c *Conn, cmd map[string]any) ([]byte, error) {
	return command(ctx, c, cmd, func(r *rados.Conn, b []byte) ([]byte, string, error) {
		return r.MgrCommand([][]byte{b})
	})
}

func command(ctx context.Context, c *Conn, cmd map[string]any, send func(*rados.Conn, []byte) ([]byte, string, error)) ([]byte, error) {
	if _, ok := cmd["format"]; !ok {
		cmd["format"] = "json"
	}
	body, err := json.Marshal(cmd)
	if err != nil {
		return nil, fmt.Errorf("encode command: %w", err)
	}
	op := fmt.Sprint(cmd["prefix"])
	type out struct {
		buf    []byte
		status string
	}
	res, err := Call(ctx, c, op, func(r *rados.Conn) (out, error) {
		buf, status, err := send(r, body)
		return out{buf, status}, err
	})
	if err != nil {
		return nil, WrapDetail(op, err, strings.TrimSpace(res.status))
	}
	return res.buf, nil
}

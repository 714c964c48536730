package ceph

import (
	"bytes"
	"context"
	"fmt"
	"net"
)

// ProbeMonitor dials a monitor endpoint ("host:port") and reads the messenger banner every Ceph
// daemon sends first ("ceph v027" for msgr1, "ceph v2\n" for msgr2). It needs no credentials,
// so reachability can be reported for clusters whose secrets only arrive with RPCs, and it
// proves a Ceph messenger answers, not merely that a port is open.
func ProbeMonitor(ctx context.Context, endpoint string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", endpoint)
	if err != nil {
		return err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetReadDeadline(dl)
	}
	buf := make([]byte, 6)
	n := 0
	for n < len(buf) {
		m, err := conn.Read(buf[n:])
		n += m
		if err != nil {
			return fmt.Errorf("read banner from %s: %w", endpoint, err)
		}
	}
	if !bytes.Equal(buf, []byte("ceph v")) {
		return fmt.Errorf("%s does not speak the Ceph protocol (banner %q)", endpoint, buf[:n])
	}
	return nil
}

package hostexec

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestHostExecutor(t *testing.T) {
	t.Setenv("CEPH_ARGS", "--id intruder")
	t.Setenv("CEPH_CONF", "/etc/elsewhere.conf")
	x := New(500 * time.Millisecond)
	tests := []struct {
		name     string
		argv     []string
		wantOut  string
		wantCode int // -1: no exit status; 0: success
		wantErr  error
	}{
		{"output", []string{"sh", "-c", "echo out; echo err >&2"}, "out\nerr\n", 0, nil},
		{"ceph environment dropped", []string{"sh", "-c", `echo "[$CEPH_ARGS][$CEPH_CONF][$LC_ALL]"`}, "[][][C]\n", 0, nil},
		{"exit status", []string{"sh", "-c", "echo failing; exit 3"}, "failing\n", 3, nil},
		{"timeout", []string{"sleep", "5"}, "", -1, context.DeadlineExceeded},
		{"not installed", []string{"monoceph-no-such-command"}, "", -1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			out, err := x.Run(context.Background(), tt.argv[0], tt.argv[1:]...)
			if string(out) != tt.wantOut {
				t.Errorf("output = %q, want %q", out, tt.wantOut)
			}
			if tt.wantCode == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || ExitCode(err) != tt.wantCode {
				t.Fatalf("err = %v (exit %d), want exit %d", err, ExitCode(err), tt.wantCode)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.argv[0]) {
				t.Fatalf("error %q does not name the command", err)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Fatalf("took %v: the timeout did not hold", d)
			}
		})
	}
}

func TestCommandErrorTruncatesOutput(t *testing.T) {
	e := &CommandError{Name: "mkfs.ext4", Args: []string{"/dev/loop0"}, Output: strings.Repeat("x", 5000) + "the reason", Err: errors.New("exit status 1")}
	msg := e.Error()
	if len(msg) > maxOutput+100 || !strings.HasSuffix(msg, "the reason") {
		t.Fatalf("message (%d bytes) should keep the last %d bytes of output: %q...", len(msg), maxOutput, msg[:80])
	}
}

func TestRedact(t *testing.T) {
	const key = "AQAAAAAAAAAAABAAMDEyMzQ1Njc4OWFiY2RlZg=="
	var err error = &CommandError{Name: "ceph-fuse", ExitCode: 1, Output: "auth: failed to decode key '" + key + "'", Err: errors.New("exit status 1")}
	if got := Redact(err, key); got != err || strings.Contains(got.Error(), key) || !strings.Contains(got.Error(), "<redacted>") {
		t.Fatalf("Redact = %v", got)
	}
	if ExitCode(err) != 1 {
		t.Fatalf("ExitCode after Redact = %d", ExitCode(err))
	}
	// a CommandError deeper in the chain: its output is redacted too
	ce := &CommandError{Name: "mount", Output: key}
	Redact(fmt.Errorf("mounting: %w", ce), key)
	if strings.Contains(ce.Output, key) {
		t.Fatalf("wrapped CommandError output %q", ce.Output)
	}
	plain := errors.New("no command: " + key)
	if Redact(plain, key) != plain || Redact(nil, key) != nil {
		t.Fatal("Redact changed an error that is not a CommandError")
	}
}

func TestNewDefaultTimeout(t *testing.T) {
	if x := New(0).(hostExecutor); x.timeout != DefaultTimeout {
		t.Fatalf("timeout = %v, want %v", x.timeout, DefaultTimeout)
	}
}

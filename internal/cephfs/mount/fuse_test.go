package mount

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/hostexec"
)

func testCred(t *testing.T) ceph.Credentials {
	t.Helper()
	// a cephx key: type 1 (AES), creation time, secret length 16, secret
	cred, err := ceph.NewCredentials("csi-node", "AQAAAAAAAAAAABAAMDEyMzQ1Njc4OWFiY2RlZg==")
	if err != nil {
		t.Fatal(err)
	}
	return cred
}

func testRequest(t *testing.T) Request {
	work := t.TempDir()
	return Request{
		Monitors: []string{"10.0.0.1:6789", "[v2:10.0.0.2:3300,v1:10.0.0.2:6789]"},
		FSName:   "myfs",
		Path:     "/volumes/csi/sub/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",
		Target:   filepath.Join(t.TempDir(), "staging"),
		Options:  []string{"debug", "--client_cache_size=1000"},
		Cred:     testCred(t),
		WorkDir:  work,
	}
}

func newTestFuse(x hostexec.Executor, t *testing.T) *Fuse {
	f := NewFuse(x, 15*time.Second)
	f.proc = t.TempDir() // no daemons
	return f
}

func TestFuseArgs(t *testing.T) {
	r := testRequest(t)
	f := newTestFuse(&fakeExec{}, t)
	tests := []struct {
		name     string
		readOnly bool
		wantO    string
	}{
		{name: "read-write", wantO: "debug"},
		{name: "read-only last", readOnly: true, wantO: "debug,ro"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r.ReadOnly = tt.readOnly
			got := f.Args(r, "/state/keyfile-1")
			want := []string{
				r.Target,
				"-c", filepath.Join(r.WorkDir, "ceph.conf"),
				"-m", "10.0.0.1:6789,[v2:10.0.0.2:3300,v1:10.0.0.2:6789]",
				"--id", "csi-node",
				"--keyfile", "/state/keyfile-1",
				"--client_fs", "myfs",
				"-r", r.Path,
				"--admin_socket=" + filepath.Join(r.WorkDir, "ceph-fuse.asok"),
				"--pid_file=",
				"--log_file=" + filepath.Join(r.WorkDir, "ceph-fuse.log"),
				"--client_mount_timeout=15",
				"--client_cache_size=1000",
				"-o", tt.wantO,
			}
			if !slices.Equal(got, want) {
				t.Fatalf("Args =\n%q\nwant\n%q", got, want)
			}
		})
	}
}

// TestFuseMountKeyHandling checks that the key reaches ceph-fuse only through a 0600 file that
// is gone once Mount returns, never on the command line.
func TestFuseMountKeyHandling(t *testing.T) {
	r := testRequest(t)
	var keyFile string
	x := &fakeExec{run: func(name string, args []string) ([]byte, error) {
		if name != "ceph-fuse" {
			return nil, nil
		}
		i := slices.Index(args, "--keyfile")
		if i < 0 {
			t.Errorf("no --keyfile in %q", args)
			return nil, nil
		}
		keyFile = args[i+1]
		fi, err := os.Stat(keyFile)
		if err != nil {
			t.Errorf("key file while ceph-fuse runs: %v", err)
			return nil, nil
		}
		if fi.Mode().Perm() != 0o600 || filepath.Dir(keyFile) != r.WorkDir {
			t.Errorf("key file %s has mode %v, want 0600 in %s", keyFile, fi.Mode().Perm(), r.WorkDir)
		}
		if b, _ := os.ReadFile(keyFile); string(b) != r.Cred.Key() {
			t.Errorf("key file holds %q", b)
		}
		return nil, nil
	}}
	if err := newTestFuse(x, t).Mount(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	for _, c := range x.commands() {
		if strings.Contains(c, r.Cred.Key()) {
			t.Errorf("the key is on a command line: %s", c)
		}
	}
	if _, err := os.Stat(keyFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("key file %s after Mount: %v", keyFile, err)
	}
	if leftover, _ := filepath.Glob(filepath.Join(r.WorkDir, hostexec.KeyFilePrefix+"*")); len(leftover) > 0 {
		t.Errorf("key files left: %v", leftover)
	}
}

func TestFuseMountErrors(t *testing.T) {
	tests := []struct {
		name   string
		output string
		kind   error
	}{
		{name: "missing path", output: "ceph-fuse[1]: ceph mount failed with (2) No such file or directory", kind: ceph.ErrNotFound},
		{name: "denied", output: "monclient(hunting): authenticate failed: (13) Permission denied", kind: ceph.ErrPermission},
		{name: "timeout", output: "ceph-fuse[1]: ceph mount failed with (110) Connection timed out", kind: ceph.ErrTimeout},
		{name: "undecodable key is echoed", output: "auth: failed to decode key '%KEY%'\nfailed to fetch mon config", kind: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := testRequest(t)
			x := &fakeExec{run: func(name string, args []string) ([]byte, error) {
				if name == "ceph-fuse" {
					return nil, failure(name, args, strings.ReplaceAll(tt.output, "%KEY%", r.Cred.Key()))
				}
				return nil, nil
			}}
			err := newTestFuse(x, t).Mount(context.Background(), r)
			if err == nil {
				t.Fatal("Mount succeeded")
			}
			if strings.Contains(err.Error(), r.Cred.Key()) {
				t.Fatalf("the error shows the key: %v", err)
			}
			if tt.kind != nil && !errors.Is(err, tt.kind) {
				t.Fatalf("error %v is not %v", err, tt.kind)
			}
			if leftover, _ := filepath.Glob(filepath.Join(r.WorkDir, hostexec.KeyFilePrefix+"*")); len(leftover) > 0 {
				t.Errorf("key files left: %v", leftover)
			}
		})
	}
}

func TestFuseMountRejectsLongSocketPath(t *testing.T) {
	r := testRequest(t)
	r.WorkDir = "/" + strings.Repeat("d", MaxSocketPath)
	x := &fakeExec{}
	if err := newTestFuse(x, t).Mount(context.Background(), r); err == nil || !strings.Contains(err.Error(), "unix socket") {
		t.Fatalf("Mount = %v, want a socket path error", err)
	}
	if len(x.commands()) != 0 {
		t.Fatalf("ran %q", x.commands())
	}
}

func TestFuseDaemons(t *testing.T) {
	proc := t.TempDir()
	write := func(pid, cmdline string) {
		if err := os.MkdirAll(filepath.Join(proc, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(proc, pid, "cmdline"), []byte(cmdline), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	asok := "/state/abc/ceph-fuse.asok"
	write("100", "ceph-fuse\x00/mnt/a\x00--admin_socket="+asok+"\x00--pid_file=\x00")
	write("101", "/usr/bin/ceph-fuse\x00/mnt/a\x00--admin_socket="+asok+"\x00")
	write("102", "")                                                                        // a zombie
	write("103", "ceph-fuse\x00/mnt/b\x00--admin_socket=/state/abc/ceph-fuse.asok.old\x00") // another socket
	write("104", "sh\x00-c\x00echo --admin_socket="+asok+"\x00")                            // not ceph-fuse
	write("self", "ceph-fuse\x00--admin_socket="+asok+"\x00")
	got, err := FuseDaemons(proc, asok)
	if err != nil || !slices.Equal(got, []int{100, 101}) {
		t.Fatalf("FuseDaemons = %v, %v; want [100 101]", got, err)
	}
}

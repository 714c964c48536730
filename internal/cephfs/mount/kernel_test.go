package mount

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestKernelArgs(t *testing.T) {
	tests := []struct {
		name     string
		options  []string
		readOnly bool
		wantO    string
	}{
		{name: "plain", wantO: "name=csi-node,secretfile=/state/keyfile-1,mds_namespace=myfs"},
		{name: "with volume options", options: []string{"noatime", "recover_session=clean"},
			wantO: "name=csi-node,secretfile=/state/keyfile-1,mds_namespace=myfs,noatime,recover_session=clean"},
		{name: "read-only last", options: []string{"rw"}, readOnly: true,
			wantO: "name=csi-node,secretfile=/state/keyfile-1,mds_namespace=myfs,rw,ro"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := testRequest(t)
			r.Options, r.ReadOnly = tt.options, tt.readOnly
			got, err := NewKernel(&fakeExec{}).Args(r, "/state/keyfile-1")
			if err != nil {
				t.Fatal(err)
			}
			want := []string{"-t", "ceph", "10.0.0.1:6789,10.0.0.2:6789:" + r.Path, r.Target, "-o", tt.wantO}
			if !slices.Equal(got, want) {
				t.Fatalf("Args =\n%q\nwant\n%q", got, want)
			}
		})
	}
}

func TestKernelMonitors(t *testing.T) {
	tests := []struct {
		mons []string
		want string
		bad  bool
	}{
		{mons: []string{"10.0.0.1"}, want: "10.0.0.1:6789"},
		{mons: []string{"10.0.0.1:6790", "mon.example:6789"}, want: "10.0.0.1:6790,mon.example:6789"},
		{mons: []string{"[v2:10.0.0.3:3300,v1:10.0.0.3:6789]"}, want: "10.0.0.3:6789"},
		{mons: []string{"[v2:10.0.0.3:3300/0,v1:10.0.0.3:6789/0]", "[::1]:6789"}, want: "10.0.0.3:6789,[::1]:6789"},
		{mons: []string{"10.0.0.1,10.0.0.2"}, want: "10.0.0.1:6789,10.0.0.2:6789"},
		{mons: []string{"[v2:10.0.0.3:3300]"}, bad: true},
		{mons: nil, bad: true},
		{mons: []string{"bad host"}, bad: true},
	}
	for _, tt := range tests {
		got, err := KernelMonitors(tt.mons)
		if tt.bad {
			if err == nil {
				t.Errorf("KernelMonitors(%q) = %q, want an error", tt.mons, got)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("KernelMonitors(%q) = %q, %v; want %q", tt.mons, got, err, tt.want)
		}
	}
}

// TestKernelMountCommand runs a kernel mount through a fake mount(8): the key travels in the
// secret file only, which is gone afterwards.
func TestKernelMountCommand(t *testing.T) {
	r := testRequest(t)
	r.Options = []string{"noatime"}
	var secretFile string
	x := &fakeExec{run: func(name string, args []string) ([]byte, error) {
		for _, o := range strings.Split(args[len(args)-1], ",") {
			if f, ok := strings.CutPrefix(o, "secretfile="); ok {
				secretFile = f
			}
		}
		if b, err := os.ReadFile(secretFile); err != nil || string(b) != r.Cred.Key() {
			t.Errorf("secret file %q while mount runs: %q, %v", secretFile, b, err)
		}
		return nil, nil
	}}
	if err := NewKernel(x).Mount(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	cmds := x.commands()
	want := "mount -t ceph 10.0.0.1:6789,10.0.0.2:6789:" + r.Path + " " + r.Target +
		" -o name=csi-node,secretfile=" + secretFile + ",mds_namespace=myfs,noatime"
	if len(cmds) != 1 || cmds[0] != want {
		t.Fatalf("commands %q, want [%q]", cmds, want)
	}
	if strings.Contains(cmds[0], r.Cred.Key()) {
		t.Fatal("the key is on the command line")
	}
	if _, err := os.Stat(secretFile); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("secret file after Mount: %v", err)
	}
}

func TestKernelMountError(t *testing.T) {
	r := testRequest(t)
	x := &fakeExec{run: func(name string, args []string) ([]byte, error) {
		return nil, failure(name, args, "mount error 2 = No such file or directory")
	}}
	err := NewKernel(x).Mount(context.Background(), r)
	if err == nil || !strings.Contains(err.Error(), "mount error 2") {
		t.Fatalf("Mount = %v", err)
	}
}

func TestKernelAvailable(t *testing.T) {
	dir := t.TempDir()
	withCeph := filepath.Join(dir, "with")
	without := filepath.Join(dir, "without")
	if err := os.WriteFile(withCeph, []byte("nodev\tsysfs\n\text4\nnodev\tceph\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(without, []byte("nodev\tsysfs\n\text4\nnodev\tfuse\nnodev\tcephx\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	noModule := func(name string, args []string) ([]byte, error) {
		return nil, failure(name, args, "modprobe: FATAL: Module ceph not found")
	}
	tests := []struct {
		name         string
		filesystems  string
		modprobe     func(string, []string) ([]byte, error)
		available    bool
		wantCommands int
	}{
		{name: "listed", filesystems: withCeph, available: true, wantCommands: 0},
		{name: "no module", filesystems: without, modprobe: noModule, available: false, wantCommands: 1},
		{name: "modprobe loads nothing", filesystems: without, available: false, wantCommands: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := &fakeExec{run: tt.modprobe}
			k := NewKernelWith(x, tt.filesystems)
			for range 3 { // a failed modprobe is not repeated at once
				err := k.Available(context.Background())
				if tt.available != (err == nil) {
					t.Fatalf("Available = %v", err)
				}
				if err != nil && !errors.Is(err, ErrMounterUnavailable) {
					t.Fatalf("Available = %v, not ErrMounterUnavailable", err)
				}
			}
			if n := len(x.commands()); n != tt.wantCommands {
				t.Fatalf("ran %q, want %d commands", x.commands(), tt.wantCommands)
			}
		})
	}
}

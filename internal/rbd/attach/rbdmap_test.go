package attach

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/monoceph/monoceph/internal/hostexec"
)

// fakeHost makes a sysfs and /dev with just what Available looks for.
func fakeHost(t *testing.T, krbd, nbd bool) (sys, dev string) {
	t.Helper()
	root := t.TempDir()
	sys, dev = filepath.Join(root, "sys"), filepath.Join(root, "dev")
	for _, d := range []string{sys, dev} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if krbd {
		if err := os.MkdirAll(filepath.Join(sys, "bus", "rbd"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if nbd {
		if err := os.WriteFile(filepath.Join(dev, "nbd0"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return sys, dev
}

func found(string) (string, error) { return "/usr/bin/x", nil }

func TestMapperCommandLines(t *testing.T) {
	cred, key := testCred(t)
	tests := []struct {
		name     string
		mapper   func(hostexec.Executor) *Mapper
		req      Request
		wantMap  []string // after the credential arguments
		unmapArg []string
	}{
		{
			name:     "krbd read-write",
			mapper:   NewKRBD,
			req:      Request{Image: Image{Pool: "rbd", Name: "img"}, MonHost: "10.0.0.1:6789,10.0.0.2:6789"},
			wantMap:  []string{"device", "map", "--device-type", "krbd", "--options", "noudev", "rbd/img"},
			unmapArg: []string{"rbd", "device", "unmap", "--device-type", "krbd", "--options", "noudev", "/dev/rbd3"},
		},
		{
			name:     "krbd read-only in a namespace",
			mapper:   NewKRBD,
			req:      Request{Image: Image{Pool: "rbd", Namespace: "k8s", Name: "img"}, MonHost: "[v2:10.0.0.1:3300,v1:10.0.0.1:6789]", ReadOnly: true},
			wantMap:  []string{"device", "map", "--device-type", "krbd", "--read-only", "--options", "noudev", "rbd/k8s/img"},
			unmapArg: []string{"rbd", "device", "unmap", "--device-type", "krbd", "--options", "noudev", "/dev/rbd3"},
		},
		{
			name:     "rbd-nbd",
			mapper:   NewNBD,
			req:      Request{Image: Image{Pool: "data", Name: "img"}, MonHost: "mon"},
			wantMap:  []string{"device", "map", "--device-type", "nbd", "data/img"},
			unmapArg: []string{"rbd", "device", "unmap", "--device-type", "nbd", "/dev/rbd3"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fx := &fakeExec{t: t, key: key, answers: map[string]answer{
				"rbd device list": {out: "[]"},
				"device map":      {out: "/dev/rbd3\n"},
			}}
			m := tt.mapper(fx)
			m.sys, m.dev = fakeHost(t, true, true)
			m.lookPath = found
			m.ConnectTimeout = 7 * time.Second
			tt.req.Cred, tt.req.WorkDir = cred, t.TempDir()

			a, err := m.Attach(context.Background(), tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if a.Device != "/dev/rbd3" {
				t.Fatalf("device = %q", a.Device)
			}
			if len(fx.calls) != 2 {
				t.Fatalf("calls = %q, want list then map", fx.calls)
			}
			got := fx.calls[1]
			keyfile := argAfter(got, "--keyfile")
			want := append([]string{"rbd", "-c", filepath.Join(tt.req.WorkDir, "ceph.conf"), "-m", tt.req.MonHost,
				"--id", "csi-node", "--keyfile", keyfile, "--client_mount_timeout=7"}, tt.wantMap...)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("map command\n got %q\nwant %q", got, want)
			}
			if !strings.HasPrefix(keyfile, tt.req.WorkDir+"/keyfile-") {
				t.Fatalf("key file %q is not in the work directory", keyfile)
			}
			if !reflect.DeepEqual(fx.keyRead, []string{key}) {
				t.Fatalf("the tool read %q from the key file, want the key", fx.keyRead)
			}
			if _, err := os.Stat(keyfile); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("key file still there after Attach: %v", err)
			}
			fx.assertNoSecret(t)

			// already mapped: Attach finds it, Detach unmaps it
			fx.calls = nil
			list := `[{"id":"3","pool":"` + tt.req.Image.Pool + `","namespace":"` + tt.req.Image.Namespace + `","name":"img","snap":"-","device":"/dev/rbd3"}]`
			if tt.mapper(nil).deviceType == "nbd" { // rbd-nbd says "image", not "name"
				list = strings.Replace(list, `"name"`, `"image"`, 1)
			}
			fx.answers["rbd device list"] = answer{out: list}
			if a2, err := m.Attach(context.Background(), tt.req); err != nil || a2.Device != "/dev/rbd3" || len(fx.calls) != 1 {
				t.Fatalf("second Attach = %+v, %v after %q; want the mapped device and no map", a2, err, fx.calls)
			}
			fx.calls = nil
			if err := m.Detach(context.Background(), a); err != nil {
				t.Fatal(err)
			}
			if len(fx.calls) != 2 || !reflect.DeepEqual(fx.calls[1], tt.unmapArg) {
				t.Fatalf("detach ran %q, want list then %q", fx.calls, tt.unmapArg)
			}
			if _, err := os.Stat(filepath.Join(tt.req.WorkDir, "ceph.conf")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("ceph.conf left after Detach: %v", err)
			}

			// gone already: Detach runs no unmap
			fx.calls = nil
			fx.answers["rbd device list"] = answer{out: "[]"}
			if err := m.Detach(context.Background(), a); err != nil || len(fx.calls) != 1 {
				t.Fatalf("detach of an unmapped image ran %q, %v", fx.calls, err)
			}
		})
	}
}

func TestMapperImageNotFound(t *testing.T) {
	cred, key := testCred(t)
	fx := &fakeExec{t: t, key: key, answers: map[string]answer{
		"rbd device list": {out: "[]"},
		"device map": {out: "rbd: error opening image img: (2) No such file or directory\n",
			err: &hostexec.CommandError{Name: "rbd", ExitCode: 2, Err: errors.New("exit status 2")}},
	}}
	m := NewKRBD(fx)
	m.sys, m.dev = fakeHost(t, true, false)
	m.lookPath = found
	_, err := m.Attach(context.Background(), Request{Image: Image{Pool: "rbd", Name: "img"}, Cred: cred, WorkDir: t.TempDir()})
	if !errors.Is(err, ErrImageNotFound) {
		t.Fatalf("err = %v, want ErrImageNotFound", err)
	}
}

func TestMapperAvailable(t *testing.T) {
	missing := func(cmd string) func(string) (string, error) {
		return func(c string) (string, error) {
			if c == cmd {
				return "", errors.New("not found")
			}
			return "/usr/bin/" + c, nil
		}
	}
	tests := []struct {
		name      string
		mapper    func(hostexec.Executor) *Mapper
		krbd, nbd bool
		lookPath  func(string) (string, error)
		want      string // substring of the error; "" means available
	}{
		{"krbd loaded", NewKRBD, true, false, found, ""},
		{"krbd no module", NewKRBD, false, true, found, "bus/rbd is missing (the rbd kernel module is not loaded)"},
		{"krbd no rbd tool", NewKRBD, true, false, missing("rbd"), "the rbd command is not installed"},
		{"nbd loaded", NewNBD, false, true, found, ""},
		{"nbd no module", NewNBD, true, false, found, "nbd0 is missing (the nbd kernel module is not loaded)"},
		{"nbd no rbd-nbd", NewNBD, false, true, missing("rbd-nbd"), "the rbd-nbd command is not installed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := tt.mapper(nil)
			m.sys, m.dev = fakeHost(t, tt.krbd, tt.nbd)
			m.lookPath = tt.lookPath
			err := m.Available()
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var u *UnavailableError
			if !errors.As(err, &u) || u.Mounter != m.Name() || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Available() = %v, want an UnavailableError for %s containing %q", err, m.Name(), tt.want)
			}
			// and Attach refuses before running anything
			fx := &fakeExec{t: t}
			m.x = fx
			if _, err := m.Attach(context.Background(), Request{}); !errors.As(err, &u) || len(fx.calls) != 0 {
				t.Fatalf("Attach = %v after %q, want UnavailableError and no command", err, fx.calls)
			}
		})
	}
}

func argAfter(argv []string, flag string) string {
	for i, a := range argv {
		if a == flag && i+1 < len(argv) {
			return argv[i+1]
		}
	}
	return ""
}

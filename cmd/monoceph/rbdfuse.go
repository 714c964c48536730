package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/monoceph/monoceph/internal/rbd/imagefs"
)

const rbdFuseUsage = `usage: monoceph rbd-fuse [flags] MOUNTPOINT

Shows one RBD image as the file MOUNTPOINT/IMAGE, like rbd-fuse with the same arguments, for a
loop device on it; returns once it is mounted, leaving a daemon that serves it until the mount
is unmounted. The node plugin uses it where the node's rbd-fuse cannot serve the image (Debian
13's and forky's rbd-fuse crash when given a pool or namespace).

`

// rbdFuse is the rbd-fuse subcommand: it takes the arguments monoceph gives rbd-fuse.
func rbdFuse(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("monoceph rbd-fuse", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, rbdFuseUsage); fs.PrintDefaults() }
	var cfg imagefs.Config
	fs.StringVar(&cfg.ConfFile, "c", "", "Ceph configuration file to read first")
	fs.StringVar(&cfg.MonHost, "m", "", "monitor addresses")
	fs.StringVar(&cfg.ID, "id", "admin", "Ceph user")
	fs.StringVar(&cfg.KeyFile, "keyfile", "", "file holding the user's key (read while connecting)")
	timeout := fs.Int("client_mount_timeout", 30, "seconds to connect")
	fs.StringVar(&cfg.Pool, "poolname", "rbd", "pool")
	fs.StringVar(&cfg.Namespace, "namespace", "", "RADOS namespace")
	fs.StringVar(&cfg.Image, "r", "", "image")
	opts := fs.String("o", "", "mount options: ro, and rbd-fuse's attr_timeout, entry_timeout, negative_timeout (always 0 here)")
	// rbd-fuse's arguments without a meaning here: no admin socket or log file is made
	fs.String("admin_socket", "", "ignored")
	fs.String("log_file", "", "ignored")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "monoceph rbd-fuse: "+format+"\n", a...)
		return 2
	}
	if fs.NArg() != 1 {
		return fail("want one MOUNTPOINT argument")
	}
	if cfg.Image == "" || cfg.MonHost == "" {
		return fail("-r IMAGE and -m MONITORS are required")
	}
	for o := range strings.SplitSeq(*opts, ",") {
		name, _, _ := strings.Cut(o, "=")
		switch name {
		case "":
		case "ro":
			cfg.ReadOnly = true
		case "attr_timeout", "entry_timeout", "negative_timeout":
		default:
			return fail("mount option %q is not supported", o)
		}
	}
	cfg.ConnectTimeout = time.Duration(*timeout) * time.Second
	dir := fs.Arg(0)
	if os.Getenv(imagefs.ServeEnv) != "" {
		return imagefs.Serve(cfg, dir)
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "monoceph rbd-fuse: %v\n", err)
		return 1
	}
	// connecting, then opening the image, each within the connect timeout
	err = imagefs.Start(context.Background(), exe, append([]string{"rbd-fuse"}, args...), 2*cfg.ConnectTimeout+5*time.Second)
	if err != nil {
		fmt.Fprintf(stderr, "monoceph rbd-fuse: %v\n", err)
		if nf := (*imagefs.NotFoundError)(nil); errors.As(err, &nf) {
			return imagefs.ExitNotFound
		}
		return 1
	}
	return 0
}

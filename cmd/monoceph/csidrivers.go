package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/monoceph/monoceph/internal/kubecsi"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// csiDrivers is a repeated --csidriver flag: each a CSIDriver object as JSON.
type csiDrivers []*storagev1.CSIDriver

func (c *csiDrivers) String() string { return fmt.Sprint(len(*c), " CSIDriver objects") }

func (c *csiDrivers) Set(s string) error {
	var d storagev1.CSIDriver
	if err := json.Unmarshal([]byte(s), &d); err != nil {
		return err
	}
	if d.Kind != "CSIDriver" || d.Name == "" {
		return fmt.Errorf("not a named CSIDriver object")
	}
	*c = append(*c, &d)
	return nil
}

// replaceCSIDrivers is the chart's pre-upgrade hook: it deletes installed CSIDriver objects
// that the upgrade could not update because their immutable fields change (see
// kubecsi.ReplaceIfImmutable); the upgrade then creates them anew.
func replaceCSIDrivers(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("monoceph replace-csidrivers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	klog.InitFlags(fs)
	var want csiDrivers
	fs.Var(&want, "csidriver", "the CSIDriver the upgrade installs, as JSON (repeat for each driver)")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default $KUBECONFIG or the pod's service account)")
	timeout := fs.Duration("timeout", 2*time.Minute, "bound on the whole run")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if len(want) == 0 || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "monoceph replace-csidrivers: give each CSIDriver with --csidriver and nothing else")
		return 2
	}
	cfg, err := kubecsi.Config(*kubeconfig)
	if err != nil {
		fmt.Fprintf(stderr, "monoceph replace-csidrivers: %v\n", err)
		return 1
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "monoceph replace-csidrivers: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	for _, d := range want {
		replaced, err := kubecsi.ReplaceIfImmutable(ctx, kc, d)
		if err != nil {
			fmt.Fprintf(stderr, "monoceph replace-csidrivers: %v\n", err)
			return 1
		}
		if replaced {
			fmt.Fprintf(stdout, "CSIDriver %s: deleted, its immutable fields change; the upgrade creates it anew\n", d.Name)
		} else {
			fmt.Fprintf(stdout, "CSIDriver %s: nothing to replace\n", d.Name)
		}
	}
	return 0
}

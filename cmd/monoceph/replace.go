package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/monoceph/monoceph/internal/kubecsi"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"
)

// objects is a repeated --object flag: each a Kubernetes object as JSON.
type objects []*unstructured.Unstructured

func (o *objects) String() string { return fmt.Sprint(len(*o), " objects") }

func (o *objects) Set(s string) error {
	var u unstructured.Unstructured
	if err := json.Unmarshal([]byte(s), &u.Object); err != nil {
		return err
	}
	if _, ok := kubecsi.Replaceable[u.GetKind()]; !ok || u.GetName() == "" {
		return fmt.Errorf("want a named CSIDriver or StorageClass, got %s %q", u.GetKind(), u.GetName())
	}
	*o = append(*o, &u)
	return nil
}

// replaceImmutable is the chart's pre-upgrade hook: it deletes installed CSIDrivers and
// StorageClasses the upgrade could not update because it changes fields Kubernetes keeps
// immutable (see kubecsi.ReplaceIfImmutable); the upgrade then creates them anew.
func replaceImmutable(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("monoceph replace-immutable", flag.ContinueOnError)
	fs.SetOutput(stderr)
	klog.InitFlags(fs)
	var want objects
	fs.Var(&want, "object", "a CSIDriver or StorageClass the upgrade installs, as JSON (repeat for each)")
	releaseFlag := fs.String("release", "", "<namespace>/<name> of the Helm release upgraded: only its objects are replaced")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default $KUBECONFIG or the pod's service account)")
	timeout := fs.Duration("timeout", 2*time.Minute, "bound on the whole run")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if len(want) == 0 || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "monoceph replace-immutable: give each object with --object and nothing else")
		return 2
	}
	release, err := kubecsi.ParseRelease(*releaseFlag)
	if err != nil {
		fmt.Fprintf(stderr, "monoceph replace-immutable: --release: %v\n", err)
		return 2
	}
	cfg, err := kubecsi.Config(*kubeconfig)
	if err != nil {
		fmt.Fprintf(stderr, "monoceph replace-immutable: %v\n", err)
		return 1
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "monoceph replace-immutable: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	for _, o := range want {
		replaced, err := kubecsi.ReplaceIfImmutable(ctx, dc, o, release)
		if err != nil {
			fmt.Fprintf(stderr, "monoceph replace-immutable: %v\n", err)
			return 1
		}
		if replaced {
			fmt.Fprintf(stdout, "%s %s: deleted, the upgrade changes immutable fields and creates it anew\n", o.GetKind(), o.GetName())
		} else {
			fmt.Fprintf(stdout, "%s %s: nothing to replace\n", o.GetKind(), o.GetName())
		}
	}
	return 0
}

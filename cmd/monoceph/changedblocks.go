package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/monoceph/monoceph/internal/snapmeta"
	"k8s.io/client-go/tools/clientcmd"
)

const changedBlocksUsage = `usage: monoceph changed-blocks [flags] NAMESPACE/SNAPSHOT

Lists the allocated extents of a VolumeSnapshot, or with --base-snapshot(-id) the extents changed
since an earlier one, through the driver's SnapshotMetadataService exactly as backup
applications reach it (service account token for its audience, TLS to its address).

`

// changedBlocks is the changed-blocks subcommand.
func changedBlocks(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("monoceph changed-blocks", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, changedBlocksUsage); fs.PrintDefaults() }
	var a snapmeta.ChangedBlocksArgs
	var maxResults int
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default $KUBECONFIG, ~/.kube/config, or the pod's service account)")
	timeout := fs.Duration("timeout", 30*time.Minute, "give up after this long")
	fs.StringVar(&a.BaseSnapshotID, "base-snapshot-id", "", "list changes since this CSI snapshot handle (VolumeSnapshotContent status.snapshotHandle)")
	fs.StringVar(&a.BaseSnapshot, "base-snapshot", "", "list changes since this VolumeSnapshot of the same namespace")
	fs.StringVar(&a.ServiceAccount, "service-account", "", "NAMESPACE/NAME of the service account whose token the request carries (default: the caller, when it is one)")
	fs.StringVar(&a.Driver, "driver", "", "CSI driver whose SnapshotMetadataService to use (default: read from the snapshot)")
	fs.Int64Var(&a.StartingOffset, "starting-offset", 0, "first byte to report (resumes an interrupted listing)")
	fs.IntVar(&maxResults, "max-results", 0, "extents per message (0: the driver's default)")
	fs.StringVar(&a.Output, "o", "table", "output format: table or json")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "monoceph changed-blocks: want one NAMESPACE/SNAPSHOT argument")
		return 2
	}
	var ok bool
	if a.Namespace, a.Snapshot, ok = strings.Cut(fs.Arg(0), "/"); !ok || a.Namespace == "" || a.Snapshot == "" {
		fmt.Fprintf(stderr, "monoceph changed-blocks: %q is not NAMESPACE/SNAPSHOT\n", fs.Arg(0))
		return 2
	}
	a.MaxResults = int32(min(maxResults, 1<<30))

	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = *kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		fmt.Fprintf(stderr, "monoceph changed-blocks: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if err := snapmeta.ChangedBlocks(ctx, cfg, a, stdout); err != nil {
		fmt.Fprintf(stderr, "monoceph changed-blocks: %v\n", err)
		return 1
	}
	return 0
}

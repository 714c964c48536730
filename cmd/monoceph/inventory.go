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

	"github.com/container-storage-interface/spec/lib/go/csi"
	v1 "github.com/monoceph/monoceph/api/v1"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/clustermap"
	"github.com/monoceph/monoceph/internal/driver"
	"github.com/monoceph/monoceph/internal/inventory"
	"github.com/monoceph/monoceph/internal/oplock"
	"github.com/monoceph/monoceph/internal/rbd"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

const inventoryUsage = `usage: monoceph inventory [flags]

Lists, per cluster and RBD pool, every volume and snapshot monoceph's journal knows, the images
named like monoceph's without a journal entry and monoceph's images in the trash, joined with
the PersistentVolumes, VolumeSnapshotContents and VolumeAttachments of the driver: in-use,
bound, released, orphaned (no PV), dangling (a PV whose image is gone), journal-only,
unjournaled, trashed. --delete-orphans deletes orphans older than --grace through the
controller's own DeleteVolume/DeleteSnapshot (a dry run unless --dry-run=false).

`

// inventoryCmd is the inventory subcommand.
func inventoryCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("monoceph inventory", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, inventoryUsage); fs.PrintDefaults() }
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default $KUBECONFIG, ~/.kube/config, or the pod's service account)")
	clusterConfig := fs.String("cluster-config", "/etc/monoceph/clusters.json", "path of the cluster map (JSON)")
	drivers := fs.String("driver", driver.DefaultRBDDriverName, "comma-separated CSI driver names whose PVs, snapshots and StorageClasses are read")
	pools := fs.String("pool", "", "comma-separated RBD pools to scan on every cluster, besides those of the drivers' StorageClasses")
	secret := fs.String("secret", "", "NAMESPACE/NAME of a Secret with the Ceph user (userID, userKey), as the StorageClasses reference")
	user := fs.String("ceph-user", "", "Ceph user (instead of --secret), with --ceph-key-file")
	keyFile := fs.String("ceph-key-file", "", "file holding the Ceph user's base64 key")
	output := fs.String("o", "table", "output format: table, json, or prometheus (counts per state, for node_exporter's textfile collector)")
	deleteOrphans := fs.Bool("delete-orphans", false, "delete orphaned volumes and snapshots older than --grace")
	dryRun := fs.Bool("dry-run", true, "with --delete-orphans: only list what would be deleted")
	grace := fs.Duration("grace", 24*time.Hour, "with --delete-orphans: minimum age (from the image's creation time)")
	backfill := fs.Bool("backfill-owners", false, "write the ownership keys (PV, PVC, namespace, --cluster-name) of bound volumes and snapshots onto those missing them; keys already there stay (a dry run unless --dry-run=false)")
	clusterName := fs.String("cluster-name", "", "the driver's --cluster-name: with --backfill-owners, the name to store; with --delete-orphans, objects naming another cluster are never deleted")
	timeout := fs.Duration("timeout", 10*time.Minute, "give up after this long")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 || (*output != "table" && *output != "json" && *output != "prometheus") {
		fmt.Fprintln(stderr, "monoceph inventory: takes no arguments; -o is table, json or prometheus")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if err := runInventory(ctx, inventoryArgs{kubeconfig: *kubeconfig, clusterConfig: *clusterConfig, drivers: split(*drivers),
		pools: split(*pools), secret: *secret, user: *user, keyFile: *keyFile, output: *output,
		deleteOrphans: *deleteOrphans, dryRun: *dryRun, grace: *grace, backfill: *backfill, clusterName: *clusterName}, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "monoceph inventory: %v\n", err)
		return 1
	}
	return 0
}

type inventoryArgs struct {
	kubeconfig, clusterConfig, secret, user, keyFile, output, clusterName string
	drivers, pools                                                        []string
	deleteOrphans, dryRun, backfill                                       bool
	grace                                                                 time.Duration
}

func split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func runInventory(ctx context.Context, a inventoryArgs, stdout, stderr io.Writer) error {
	store, err := clustermap.Load(a.clusterConfig)
	if err != nil {
		return err
	}
	kc, dc, err := kubeClients(a.kubeconfig)
	if err != nil {
		return err
	}
	secrets, err := cephSecrets(ctx, kc, a)
	if err != nil {
		return err
	}
	cred, err := ceph.CredentialsFromSecrets(secrets)
	if err != nil {
		return err
	}
	drivers := map[string]bool{}
	for _, d := range a.drivers {
		drivers[d] = true
	}
	places, err := inventory.Places(ctx, kc, store.Map(), drivers, a.pools)
	if err != nil {
		return err
	}
	pool := ceph.NewPool(ceph.PoolOptions{})
	defer pool.Close()
	connect := func(ctx context.Context, c v1.Cluster) (*ceph.Conn, error) { return pool.Get(ctx, c.MonHost(), cred) }
	objs, covers, err := inventory.Scan(ctx, places, connect)
	if err != nil {
		return err
	}
	pvs, err := inventory.ListKube(ctx, kc, dc, drivers)
	if err != nil {
		return err
	}
	entries := inventory.Join(objs, pvs, covers)
	if a.backfill {
		if err := backfillOwners(ctx, a, entries, store, connect, stdout, stderr); err != nil || !a.deleteOrphans {
			return err
		}
	}
	if !a.deleteOrphans {
		return inventory.Write(stdout, a.output, entries)
	}
	if len(pvs) == 0 && !a.dryRun {
		// a wrong --driver or kubeconfig makes every volume look orphaned
		return fmt.Errorf("--delete-orphans: no PersistentVolume or VolumeSnapshotContent of drivers %v found: refusing to call every object an orphan (check --driver and the kubeconfig)", a.drivers)
	}
	return deleteOrphans(ctx, a, entries, store, pool, secrets, stdout, stderr)
}

func kubeClients(kubeconfig string) (kubernetes.Interface, dynamic.Interface, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, nil, err
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	return kc, dc, nil
}

// backfillOwners writes (or, in a dry run, names) the ownership keys the entries lack and
// prints the objects it wrote to.
func backfillOwners(ctx context.Context, a inventoryArgs, entries []inventory.Entry, store *clustermap.Store, connect inventory.Connector, stdout, stderr io.Writer) error {
	verb := "wrote ownership keys onto"
	if a.dryRun {
		verb = "would write ownership keys onto (dry run; --dry-run=false to act)"
	}
	clusters := map[string]v1.Cluster{}
	for _, c := range store.Map() {
		clusters[c.ClusterID] = c
	}
	done, err := inventory.Backfill(ctx, entries, clusters, connect, a.clusterName, a.dryRun)
	fmt.Fprintf(stderr, "monoceph inventory: %s %d object(s)\n", verb, len(done))
	if werr := inventory.Write(stdout, a.output, done); werr != nil && err == nil {
		err = werr
	}
	return err
}

// deleteOrphans deletes (or, in a dry run, names) the orphans older than the grace period
// through the RBD controller's own DeleteVolume and DeleteSnapshot, and prints them.
func deleteOrphans(ctx context.Context, a inventoryArgs, entries []inventory.Entry, store *clustermap.Store, pool *ceph.Pool, secrets map[string]string, stdout, stderr io.Writer) error {
	ctrl := rbd.NewController(rbd.Options{Clusters: store, Pool: pool, Locks: oplock.New()})
	done, err := inventory.DeleteOrphans(ctx, entries, time.Now(), a.grace, a.clusterName, a.dryRun, func(ctx context.Context, e inventory.Entry) error {
		if e.Kind == inventory.Snapshot {
			_, err := ctrl.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: e.Handle, Secrets: secrets})
			return err
		}
		_, err := ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: e.Handle, Secrets: secrets})
		return err
	})
	verb := "deleted"
	if a.dryRun {
		verb = "would delete (dry run; --dry-run=false to act)"
	}
	fmt.Fprintf(stderr, "monoceph inventory: %s %d orphan(s) older than %s\n", verb, len(done), a.grace)
	if werr := inventory.Write(stdout, a.output, done); werr != nil && err == nil {
		err = werr
	}
	return err
}

// cephSecrets reads the Ceph user from a Secret or from the flags, as the controller's RPCs
// carry it.
func cephSecrets(ctx context.Context, kc kubernetes.Interface, a inventoryArgs) (map[string]string, error) {
	if a.secret != "" {
		ns, name, ok := strings.Cut(a.secret, "/")
		if !ok {
			return nil, fmt.Errorf("--secret=%q: want NAMESPACE/NAME", a.secret)
		}
		s, err := kc.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		out := map[string]string{}
		for k, v := range s.Data {
			out[k] = string(v)
		}
		return out, nil
	}
	if a.user == "" || a.keyFile == "" {
		return nil, fmt.Errorf("name the Ceph user: --secret, or --ceph-user and --ceph-key-file")
	}
	key, err := os.ReadFile(a.keyFile)
	if err != nil {
		return nil, err
	}
	return map[string]string{"userID": a.user, "userKey": strings.TrimSpace(string(key))}, nil
}

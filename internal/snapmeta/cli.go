package snapmeta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/kubernetes-csi/external-snapshot-metadata/pkg/iterator"
	"github.com/monoceph/monoceph/internal/kubelog"
	"k8s.io/client-go/rest"
)

// ChangedBlocksArgs are the arguments of `monoceph changed-blocks`.
type ChangedBlocksArgs struct {
	Namespace string
	Snapshot  string // VolumeSnapshot name
	// BaseSnapshotID (a CSI snapshot handle) or BaseSnapshot (a VolumeSnapshot name in
	// Namespace) ask for the changes since that snapshot; neither asks for allocated blocks.
	BaseSnapshotID string
	BaseSnapshot   string
	// ServiceAccount ("namespace/name") is whose token the request carries; empty means the
	// caller's own identity when that is a service account (in a pod).
	ServiceAccount string
	// Driver names the SnapshotMetadataService to use; empty reads it from the snapshot.
	Driver         string
	StartingOffset int64
	MaxResults     int32
	// Output is "table" (default) or "json".
	Output string
}

// ChangedBlocks lists a snapshot's allocated or changed extents on out, through the upstream
// client library (external-snapshot-metadata's pkg/iterator): the SnapshotMetadataService
// object, a token for its audience, TLS to its address. It is exactly the path backup
// applications take, so it doubles as their troubleshooting tool.
func ChangedBlocks(ctx context.Context, cfg *rest.Config, a ChangedBlocksArgs, out io.Writer) error {
	var saNS, saName string
	if a.ServiceAccount != "" {
		var ok bool
		if saNS, saName, ok = strings.Cut(a.ServiceAccount, "/"); !ok || saNS == "" || saName == "" {
			return fmt.Errorf("--service-account %q: want namespace/name", a.ServiceAccount)
		}
	}
	var em interface {
		iterator.IteratorEmitter
		close(err error) error
	}
	switch a.Output {
	case "", "table":
		em = newTableEmitter(out)
	case "json":
		em = &jsonEmitter{w: out}
	default:
		return fmt.Errorf("--output %q: want table or json", a.Output)
	}
	clients, err := iterator.BuildClients(cfg)
	if err != nil {
		return err
	}
	// the TokenRequest's response body holds the token
	err = iterator.GetSnapshotMetadata(kubelog.Context(ctx), iterator.Args{
		Clients: clients, Emitter: em, Namespace: a.Namespace, SnapshotName: a.Snapshot,
		PrevSnapshotID: a.BaseSnapshotID, PrevSnapshotName: a.BaseSnapshot,
		StartingOffset: a.StartingOffset, MaxResults: a.MaxResults, CSIDriver: a.Driver,
		SANamespace: saNS, SAName: saName,
	})
	return em.close(err)
}

// tableEmitter prints one extent per line and a summary.
type tableEmitter struct {
	tw             *tabwriter.Writer
	extents, bytes int64
	capacity       int64
	style          string
	wroteHeader    bool
}

func newTableEmitter(w io.Writer) *tableEmitter {
	return &tableEmitter{tw: tabwriter.NewWriter(w, 0, 8, 2, ' ', tabwriter.AlignRight)}
}

func (e *tableEmitter) SnapshotMetadataIteratorRecord(_ int, m iterator.IteratorMetadata) error {
	if !e.wroteHeader {
		fmt.Fprintln(e.tw, "OFFSET\tLENGTH\tEND\t")
		e.wroteHeader = true
	}
	e.capacity, e.style = m.VolumeCapacityBytes, m.BlockMetadataType.String()
	for _, b := range m.BlockMetadata {
		fmt.Fprintf(e.tw, "%d\t%d\t%d\t\n", b.GetByteOffset(), b.GetSizeBytes(), b.GetByteOffset()+b.GetSizeBytes())
		e.extents++
		e.bytes += b.GetSizeBytes()
	}
	return nil
}

func (e *tableEmitter) SnapshotMetadataIteratorDone(int) error { return nil }

func (e *tableEmitter) close(err error) error {
	if ferr := e.tw.Flush(); err == nil {
		err = ferr
	}
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(e.tw, "%d extents, %d bytes of a %d-byte volume (%s)\n", e.extents, e.bytes, e.capacity, e.style)
	if ferr := e.tw.Flush(); err == nil {
		err = ferr
	}
	return err
}

// jsonEmitter writes one JSON document as the stream arrives, never holding the extents:
// {"blockMetadataType":…,"volumeCapacityBytes":…,"extents":[{"offset":…,"length":…},…]}.
type jsonEmitter struct {
	w       io.Writer
	started bool
	n       int
	err     error
}

func (e *jsonEmitter) printf(format string, a ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, a...)
	}
}

func (e *jsonEmitter) SnapshotMetadataIteratorRecord(_ int, m iterator.IteratorMetadata) error {
	if !e.started {
		t, _ := json.Marshal(m.BlockMetadataType.String())
		e.printf(`{"blockMetadataType":%s,"volumeCapacityBytes":%d,"extents":[`, t, m.VolumeCapacityBytes)
		e.started = true
	}
	for _, b := range m.BlockMetadata {
		sep := ","
		if e.n == 0 {
			sep = ""
		}
		e.printf("%s\n{\"offset\":%d,\"length\":%d}", sep, b.GetByteOffset(), b.GetSizeBytes())
		e.n++
	}
	return e.err
}

func (e *jsonEmitter) SnapshotMetadataIteratorDone(int) error { return nil }

func (e *jsonEmitter) close(err error) error {
	if err != nil {
		// a truncated document must not parse as a complete answer
		return errors.Join(err, e.err)
	}
	if !e.started {
		return errors.New("the service sent no metadata")
	}
	e.printf("\n]}\n")
	return e.err
}

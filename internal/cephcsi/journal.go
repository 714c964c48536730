package cephcsi

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/ceph/go-ceph/rados"
	"github.com/google/uuid"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/radosop"
	"github.com/monoceph/monoceph/internal/volid"
)

// Location is where a journal lives: RBD, the pool of the images and the cluster's
// rbd.radosNamespace; CephFS, the filesystem's metadata pool and cephFS.radosNamespace ("csi"
// when unset, as in ceph-csi).
type Location = radosop.Location

// DefaultInstanceID is ceph-csi's --instanceid default, the suffix of its directory objects.
const DefaultInstanceID = "default"

// Kind is one of ceph-csi's two journals.
type Kind struct {
	dir     string // directory object prefix: <dir><instance ID>
	key     string // directory key prefix (<key><request name>) and per-entry object prefix (<key><uuid>)
	nameKey string // the entry's request name
	prefix  string // default name prefix of what the entry describes
}

// The two journals.
var (
	Volumes   = Kind{dir: "csi.volumes.", key: "csi.volume.", nameKey: "csi.volname", prefix: "csi-vol-"}
	Snapshots = Kind{dir: "csi.snaps.", key: "csi.snap.", nameKey: "csi.snapname", prefix: "csi-snap-"}
)

// Attribute keys of journal entries (ceph-csi's names).
const (
	KeyImageName      = "csi.imagename"
	KeyImageID        = "csi.imageid" // RBD: the image's ID (volumes) or the snapshot's clone image's
	KeySource         = "csi.source"  // snapshots: the source image or subvolume name
	KeyOwner          = "csi.volume.owner"
	KeyEncryptKMS     = "csi.volume.encryptKMS"
	KeyEncryptionType = "csi.volume.encryptionType"
	KeyJournalPool    = "csi.journalpool"
	// KeyBackingSnapshot marks a CephFS shallow volume: the handle of the snapshot it exposes.
	KeyBackingSnapshot = "csi.volume.backingsnapshotid"
	KeyGroupID         = "csi.groupid"
)

// DirObject is the directory object of k for a ceph-csi instance.
func (k Kind) DirObject(instance string) string { return k.dir + instance }

// Object is the per-entry object of a UUID.
func (k Kind) Object(id string) string { return k.key + id }

func (k Kind) dirKey(name string) string { return k.key + name }

// DefaultName is what ceph-csi names the image, subvolume or snapshot of an entry that has no
// csi.imagename (entries older than that key).
func (k Kind) DefaultName(id string) string { return k.prefix + id }

// Entry is one reservation: a per-entry object csi.volume.<uuid> or csi.snap.<uuid>.
type Entry struct {
	UUID string
	// Name is the CSI request name (csi.volname, csi.snapname).
	Name string
	// Attrs are every omap key of the object, the name key included. CephFS snapshot entries
	// of ceph-csi also carry a key "" (the PVC namespace, written under the empty key by an
	// argument-order slip); it is kept here like any other.
	Attrs map[string]string
	kind  Kind
}

// ImageName is the RBD image, CephFS subvolume or snapshot the entry describes.
func (e *Entry) ImageName() string {
	if n := e.Attrs[KeyImageName]; n != "" {
		return n
	}
	return e.kind.DefaultName(e.UUID)
}

// Encrypted reports whether ceph-csi encrypted the volume (or the snapshot's source).
func (e *Entry) Encrypted() bool {
	return e.Attrs[KeyEncryptKMS] != "" || e.Attrs[KeyEncryptionType] != ""
}

// EncryptionTypeFile is ceph-csi's KeyEncryptionType of file encryption (fscrypt inside the
// volume's filesystem); its other value, "block", is dm-crypt of the whole image.
const EncryptionTypeFile = "file"

// BlockEncrypted reports whether ceph-csi encrypted the volume (or the snapshot's source)
// with dm-crypt: its image starts with a LUKS header, so the volume's bytes are not at the
// image's offsets. Encrypted entries without a type (ceph-csi before file encryption) and types
// unknown here count as block: only file encryption keeps the image's offsets the volume's.
func (e *Entry) BlockEncrypted() bool {
	return e.Encrypted() && e.Attrs[KeyEncryptionType] != EncryptionTypeFile
}

// ceph-csi's RBD node plugin records in image metadata that it formatted the image with
// dm-crypt (LUKS); older ceph-csi wrote the key with a leading dot, and its images keep it.
var imageEncryptionKeys = []string{"rbd.csi.ceph.com/encrypted", ".rbd.csi.ceph.com/encrypted"}

// imageEncrypted is the value once the LUKS header is written ("encryptionPrepared" before:
// the image is still all the volume's).
const imageEncrypted = "encrypted"

// ImageBlockEncrypted reports whether an RBD image's metadata, read through get (ok false
// when a key is not set), says ceph-csi formatted it with dm-crypt. A clone inherits its
// parent's metadata, so a ceph-csi snapshot's image says it too.
func ImageBlockEncrypted(get func(key string) (v string, ok bool, err error)) (bool, error) {
	for _, k := range imageEncryptionKeys {
		v, ok, err := get(k)
		if err != nil {
			return false, err
		}
		if ok && v == imageEncrypted {
			return true, nil
		}
	}
	return false, nil
}

// maxKeys bounds one read of an entry object: ceph-csi writes fewer than ten keys.
const maxKeys = 1000

// Read returns the entry of a UUID, or nil when its object does not exist. An object without
// its name key (ceph-csi crashed between creating it and writing its keys) is returned with an
// empty Name.
func Read(ctx context.Context, loc Location, k Kind, id string) (*Entry, error) {
	return radosop.With(ctx, loc, "read ceph-csi journal", func(io *rados.IOContext) (*Entry, error) {
		return readEntry(io, k, id)
	})
}

func readEntry(io *rados.IOContext, k Kind, id string) (*Entry, error) {
	vals, ver, err := radosop.ReadAll(io, k.Object(id), maxKeys)
	if err != nil || ver == 0 {
		return nil, err
	}
	e := &Entry{UUID: id, Attrs: make(map[string]string, len(vals)), kind: k}
	for key, v := range vals {
		e.Attrs[key] = string(v)
	}
	e.Name = e.Attrs[k.nameKey]
	return e, nil
}

// dirValueUUID decodes a directory value: "<uuid>", or "<16 hex pool ID>/<uuid>" where an old
// ceph-csi kept the journal in another pool than the images.
func dirValueUUID(v string) string {
	if i := strings.LastIndexByte(v, '/'); i >= 0 {
		v = v[i+1:]
	}
	if !volid.ValidUUID(v) {
		return ""
	}
	return v
}

// Lookup returns the UUID a request name is reserved under, or "".
func Lookup(ctx context.Context, loc Location, k Kind, instance, name string) (string, error) {
	return radosop.With(ctx, loc, "look up ceph-csi journal", func(io *rados.IOContext) (string, error) {
		vals, _, err := radosop.ReadKeys(io, k.DirObject(instance), k.dirKey(name))
		if err != nil {
			return "", err
		}
		return dirValueUUID(string(vals[k.dirKey(name)])), nil
	})
}

// Reserve returns the entry of name, reserving it under a new UUID with attrs(UUID) when there
// is none (created). The directory key is written first and the entry's object second, so an
// object always has its key: a crash in between leaves a key naming no object, which the retry
// completes (and ceph-csi itself treats as no reservation). An existing entry is returned as it
// is for the caller to compare; one whose object was never written gets attrs.
func Reserve(ctx context.Context, loc Location, k Kind, instance, name string, attrs func(uuid string) map[string]string) (e *Entry, created bool, err error) {
	dir := k.DirObject(instance)
	id, err := radosop.Update(ctx, loc, "reserve in ceph-csi journal", dir, func(io *rados.IOContext) (*radosop.Change, uint64, string, error) {
		vals, ver, err := radosop.ReadKeys(io, dir, k.dirKey(name))
		if err != nil {
			return nil, 0, "", err
		}
		if v, ok := vals[k.dirKey(name)]; ok {
			if id := dirValueUUID(string(v)); id != "" {
				return nil, ver, id, nil
			}
			return nil, 0, "", ceph.NewError("ceph-csi journal", ceph.ErrInconsistent, fmt.Sprintf("%s names %q, not a UUID", k.dirKey(name), v))
		}
		id := uuid.NewString()
		return &radosop.Change{Set: map[string][]byte{k.dirKey(name): []byte(id)}}, ver, id, nil
	})
	if err != nil {
		return nil, false, err
	}
	full := map[string]string{k.nameKey: name}
	for key, v := range attrs(id) {
		full[key] = v
	}
	oid := k.Object(id)
	type result struct {
		e       *Entry
		created bool
	}
	res, err := radosop.Update(ctx, loc, "write ceph-csi journal entry", oid, func(io *rados.IOContext) (*radosop.Change, uint64, result, error) {
		vals, ver, err := radosop.ReadAll(io, oid, maxKeys)
		if err != nil {
			return nil, 0, result{}, err
		}
		if got, ok := vals[k.nameKey]; ok {
			if string(got) != name {
				return nil, 0, result{}, ceph.NewError("ceph-csi journal", ceph.ErrInconsistent,
					fmt.Sprintf("%s belongs to %q, but %s names it for %q", oid, got, k.dirKey(name), name))
			}
			e := &Entry{UUID: id, Name: name, Attrs: map[string]string{}, kind: k}
			for key, v := range vals {
				e.Attrs[key] = string(v)
			}
			return nil, ver, result{e, false}, nil
		}
		set := make(map[string][]byte, len(full))
		for key, v := range full {
			set[key] = []byte(v)
		}
		return &radosop.Change{Set: set}, ver, result{&Entry{UUID: id, Name: name, Attrs: full, kind: k}, true}, nil
	})
	return res.e, res.created, err
}

// SetAttrs adds or replaces attributes of an existing entry (csi.imageid once the image
// exists). It fails with ceph.ErrNotFound when the entry is gone or belongs to another name.
func SetAttrs(ctx context.Context, loc Location, e *Entry, attrs map[string]string) error {
	oid := e.kind.Object(e.UUID)
	_, err := radosop.Update(ctx, loc, "update ceph-csi journal entry", oid, func(io *rados.IOContext) (*radosop.Change, uint64, struct{}, error) {
		vals, ver, err := radosop.ReadKeys(io, oid, e.kind.nameKey)
		if err != nil {
			return nil, 0, struct{}{}, err
		}
		if ver == 0 || string(vals[e.kind.nameKey]) != e.Name {
			return nil, 0, struct{}{}, ceph.NewError("update ceph-csi journal entry", ceph.ErrNotFound, oid+" is gone")
		}
		set := make(map[string][]byte, len(attrs))
		for key, v := range attrs {
			set[key] = []byte(v)
		}
		return &radosop.Change{Set: set}, ver, struct{}{}, nil
	})
	if err == nil {
		for key, v := range attrs {
			e.Attrs[key] = v
		}
	}
	return err
}

// Release removes an entry: its directory key first (if it still names e's UUID; a name
// reserved again under another UUID is left alone), then its object. A crash in between leaves
// an object that a retry, reading it again, removes. The directory object goes with its last
// key, as monoceph's own journal objects do (ceph-csi treats a missing directory as empty).
func Release(ctx context.Context, loc Location, instance string, e *Entry) error {
	k := e.kind
	if e.Name != "" {
		dir := k.DirObject(instance)
		key := k.dirKey(e.Name)
		_, err := radosop.Update(ctx, loc, "release ceph-csi journal key", dir, func(io *rados.IOContext) (*radosop.Change, uint64, struct{}, error) {
			vals, first, ver, err := radosop.Read(io, dir, 2, key)
			if err != nil {
				return nil, 0, struct{}{}, err
			}
			v, ok := vals[key]
			if !ok || dirValueUUID(string(v)) != e.UUID {
				return nil, ver, struct{}{}, nil
			}
			if radosop.Emptied(first, []string{key}) {
				return &radosop.Change{Delete: true}, ver, struct{}{}, nil
			}
			return &radosop.Change{Rm: []string{key}}, ver, struct{}{}, nil
		})
		if err != nil {
			return err
		}
	}
	_, err := radosop.With(ctx, loc, "remove ceph-csi journal entry", func(io *rados.IOContext) (struct{}, error) {
		err := io.Delete(k.Object(e.UUID))
		if errors.Is(err, rados.ErrNotFound) {
			err = nil
		}
		return struct{}{}, err
	})
	return err
}

// List returns every entry of k reserved in the directory of instance at loc, sorted by UUID.
// Keys naming no object (a crash between the two writes of Reserve, or ceph-csi's of a delete)
// and objects naming another request are left out.
func List(ctx context.Context, loc Location, k Kind, instance string) ([]*Entry, error) {
	return radosop.With(ctx, loc, "list ceph-csi journal", func(io *rados.IOContext) ([]*Entry, error) {
		vals, err := io.GetAllOmapValues(k.DirObject(instance), "", k.key, 512)
		if errors.Is(err, rados.ErrNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		var out []*Entry
		for key, v := range vals {
			id := dirValueUUID(string(v))
			if id == "" {
				continue
			}
			e, err := readEntry(io, k, id)
			if err != nil {
				return nil, err
			}
			if e == nil || e.Name != strings.TrimPrefix(key, k.key) {
				continue
			}
			out = append(out, e)
		}
		sort.Slice(out, func(i, j int) bool { return out[i].UUID < out[j].UUID })
		return out, nil
	})
}

package mounter

import (
	"context"
	"slices"

	"github.com/monoceph/monoceph/internal/rbd/attach"
	"github.com/monoceph/monoceph/internal/rbd/volumecontext"
)

// RBD is the fuse attacher of an RBD node plugin whose images the holder serves. Attach and
// Detach run in the holder; Refresh and Check only look at the file and the loop device, which
// the plugin sees as well (the mounts propagate), so they run here and answer while the holder
// restarts.
func (c *Client) RBD(local *attach.Fuse) attach.Attacher { return &rbdAttacher{c: c, local: local} }

type rbdAttacher struct {
	c     *Client
	local *attach.Fuse
}

func (*rbdAttacher) Name() string { return volumecontext.MounterFuse }

func (a *rbdAttacher) Available() error { return attach.FuseAvailable() }

// Attach asks the holder to attach, handing it the connection kept for the volume, if any (a
// restarted holder resumes it), and keeps the connection the holder hands back.
func (a *rbdAttacher) Attach(ctx context.Context, req attach.Request) (attach.Attachment, error) {
	m := rbdAttach{Image: req.Image, MonHost: req.MonHost, Cred: wireCred(req.Cred), ReadOnly: req.ReadOnly, WorkDir: req.WorkDir, KeepOnly: req.KeepOnly,
		CrushLocation: req.CrushLocation, Encryption: req.Encryption}
	conn := a.c.kept(req.WorkDir)
	if conn == nil {
		conn = req.Resume
	}
	file := fileOf(conn)
	if conn != nil {
		m.Resume = &conn.State
		if m.Encryption == nil {
			// a recovery: the key travels with the connection it opens
			m.Encryption = conn.Encryption
		}
	}
	if m.Encryption != nil {
		h, err := a.c.Hello(ctx)
		if err != nil {
			return attach.Attachment{}, err
		}
		if !slices.Contains(h.Features, FeatureRBDEncryption) {
			return attach.Attachment{}, olderHolder(h)
		}
	}
	var out rbdAttached
	got, err := a.c.call(ctx, opRBDAttach, m, file, &out, true)
	if err != nil {
		return out.Attachment, err
	}
	if m.Encryption != nil && out.Encryption == nil {
		// a holder that ignored the key (replaced by an older one since the hello): what it
		// serves is ciphertext, and nothing may be put on it
		if file := got; file != nil {
			file.Close()
		}
		return out.Attachment, olderHolder(Info{Binary: "unknown"})
	}
	key := out.Encryption
	if key == nil {
		key = m.Encryption
	}
	a.c.keep(req.WorkDir, got, out.Session, key)
	return out.Attachment, nil
}

// Detach asks the holder to detach, with the kept connection, and gives the connection up.
func (a *rbdAttacher) Detach(ctx context.Context, at attach.Attachment) error {
	m := rbdDetach{Attachment: at}
	conn := a.c.kept(at.WorkDir)
	if conn != nil {
		m.Resume = &conn.State
	}
	if _, err := a.c.call(ctx, opRBDDetach, m, fileOf(conn), nil, true); err != nil {
		return err
	}
	a.c.release(at.WorkDir)
	return nil
}

func (a *rbdAttacher) Refresh(ctx context.Context, at attach.Attachment, minBytes int64) (int64, error) {
	return a.local.Refresh(ctx, at, minBytes)
}

func (a *rbdAttacher) Check(ctx context.Context, at attach.Attachment) error {
	return a.local.Check(ctx, at)
}

// olderHolder is the answer for an encrypted volume the holder cannot open.
func olderHolder(h Info) error {
	return &attach.UnavailableError{Mounter: volumecontext.MounterFuse,
		Missing: "the mount holder (version " + h.Binary + ") cannot open encrypted volumes (" + FeatureRBDEncryption + "): update it"}
}

package node

import (
	"context"
	"errors"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	"github.com/monoceph/monoceph/internal/kms"
	"github.com/monoceph/monoceph/internal/radosop"
	"github.com/monoceph/monoceph/internal/rbd/attach"
	"github.com/monoceph/monoceph/internal/rbd/volumecontext"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// encryption is what opens r's volume, which monoceph encrypted with librbd: the node-stage
// secret's encryptionPassphrase, as the LUKS passphrase (the default provider) or as the key
// that unwraps the DEK in the image's metadata (the metadata provider), salted with the volume
// ID; with a Vault provider the DEK itself, read from Vault's KV or decrypted by its transit
// key here, with the secret's token. The fuse mounter's server loads it; it is never written
// anywhere (see attach.Encryption).
func (s *Server) encryption(ctx context.Context, r stageRequest, monHost string, secrets map[string]string) (*attach.Encryption, error) {
	typ, err := s.opts.KMS.Provider(r.image.KMSID)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "volume_context[%q]: %v", volumecontext.EncryptionKMSID, err)
	}
	if typ == kms.TypeVaultTokens || typ == kms.TypeVaultTransit {
		dek, err := s.vaultDEK(ctx, r, monHost, secrets)
		if err != nil {
			return nil, err
		}
		return &attach.Encryption{Passphrase: dek, VolumeID: r.volumeID}, nil
	}
	pass, err := kms.Passphrase(secrets)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "volume %q is encrypted: %v (the class's node-stage secret)", r.volumeID, err)
	}
	return &attach.Encryption{Passphrase: pass, Wrapped: typ == kms.TypeMetadata, VolumeID: r.volumeID}, nil
}

// vaultDEK is the DEK of r's volume from its Vault provider: KV keeps it under the volume ID,
// transit decrypts the ciphertext in the image's metadata.
func (s *Server) vaultDEK(ctx context.Context, r stageRequest, monHost string, secrets map[string]string) ([]byte, error) {
	kmsID := r.image.KMSID
	v, err := s.opts.KMS.Vault(kmsID, secrets)
	if errors.Is(err, kms.ErrConfig) {
		return nil, status.Errorf(codes.FailedPrecondition, "KMS %q: %v", kmsID, err)
	}
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "volume %q is encrypted with KMS %q: %v (the class's node-stage secret)", r.volumeID, kmsID, err)
	}
	sealed := ""
	if v.Type() == kms.TypeVaultTransit {
		if sealed, err = s.sealedDEK(ctx, r, monHost); err != nil {
			return nil, err
		}
	}
	dek, err := v.Open(ctx, r.volumeID, sealed)
	switch {
	case errors.Is(err, kms.ErrUnavailable):
		return nil, status.Errorf(codes.Unavailable, "KMS %q: %v", kmsID, err)
	case errors.Is(err, kms.ErrDenied):
		return nil, status.Errorf(codes.PermissionDenied, "KMS %q (the token of the node-stage secret): %v", kmsID, err)
	case errors.Is(err, kms.ErrConfig):
		return nil, status.Errorf(codes.FailedPrecondition, "KMS %q: %v", kmsID, err)
	case err != nil:
		return nil, status.Errorf(codes.Internal, "volume %q: KMS %q: %v", r.volumeID, kmsID, err)
	}
	return dek, nil
}

// sealedDEK reads the transit ciphertext of the DEK from the image's metadata, as the node-stage
// credentials.
func (s *Server) sealedDEK(ctx context.Context, r stageRequest, monHost string) (string, error) {
	if s.opts.Pool == nil {
		return "", status.Error(codes.Internal, "no Ceph connection pool to read the sealed key with")
	}
	conn, err := s.opts.Pool.Get(ctx, monHost, r.cred)
	if err != nil {
		return "", err
	}
	defer conn.Release()
	loc := radosop.Location{Conn: conn, Pool: r.image.Pool, Namespace: r.image.Namespace}
	return radosop.With(ctx, loc, "read the sealed key of "+r.image.Name, func(io *rados.IOContext) (string, error) {
		img, err := rbd.OpenImageReadOnly(io, r.image.Name, rbd.NoSnapshot)
		if err != nil {
			return "", err
		}
		defer img.Close()
		return img.GetMetadata(kms.MetadataDEKKey)
	})
}

package node

import (
	"github.com/monoceph/monoceph/internal/kms"
	"github.com/monoceph/monoceph/internal/rbd/attach"
	"github.com/monoceph/monoceph/internal/rbd/volumecontext"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// encryption is what opens r's volume, which monoceph encrypted with librbd: the node-stage
// secret's encryptionPassphrase, as the LUKS passphrase (the default provider) or as the key
// that unwraps the DEK in the image's metadata (the metadata provider), salted with the volume
// ID. The fuse mounter's server loads it; it is never written anywhere (see attach.Encryption).
func (s *Server) encryption(r stageRequest, secrets map[string]string) (*attach.Encryption, error) {
	typ, err := s.opts.KMS.Provider(r.image.KMSID)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "volume_context[%q]: %v", volumecontext.EncryptionKMSID, err)
	}
	pass, err := kms.Passphrase(secrets)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "volume %q is encrypted: %v (the class's node-stage secret)", r.volumeID, err)
	}
	return &attach.Encryption{Passphrase: pass, Wrapped: typ == kms.TypeMetadata, VolumeID: r.volumeID}, nil
}

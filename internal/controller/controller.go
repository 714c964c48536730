// Package controller holds what the RBD and CephFS controller services share: connecting with
// an RPC's secrets, error helpers, snapshot list paging and capability lists.
package controller

import (
	"context"
	"errors"
	"sort"

	"github.com/container-storage-interface/spec/lib/go/csi"
	v1 "github.com/monoceph/monoceph/api/v1"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/clustermap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Base is embedded by both controllers.
type Base struct {
	Clusters *clustermap.Store
	Pool     *ceph.Pool
	// Users remembers each StorageClass's Ceph user for GetCapacity (nil: none).
	Users *ClassUsers
	// SecretOrder is which secret keys hold the Ceph user (ceph.UserFirst when nil).
	SecretOrder []ceph.SecretKeys
}

// Cluster resolves a clusterID; code is NOT_FOUND when the ID came from a volume or snapshot
// ID, INVALID_ARGUMENT when it came from parameters; field names where it came from.
func (b Base) Cluster(id string, code codes.Code, field string) (v1.Cluster, error) {
	cl, err := b.Clusters.Cluster(id)
	if err != nil {
		return cl, status.Errorf(code, "%s: %v", field, err)
	}
	return cl, nil
}

// Connect opens (or reuses) a connection to cl with the RPC's secrets.
func (b Base) Connect(ctx context.Context, cl v1.Cluster, secrets map[string]string) (*ceph.Conn, error) {
	cred, err := ceph.CredentialsFromSecrets(secrets, b.SecretOrder...)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "secrets: %v", err)
	}
	return b.Pool.Get(ctx, cl.MonHost(), cred)
}

// ConnectMgr is Connect for a connection that carries manager commands (ceph.Pool.GetForMgr).
func (b Base) ConnectMgr(ctx context.Context, cl v1.Cluster, secrets map[string]string) (*ceph.Conn, error) {
	cred, err := ceph.CredentialsFromSecrets(secrets, b.SecretOrder...)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "secrets: %v", err)
	}
	return b.Pool.GetForMgr(ctx, cl.MonHost(), cred)
}

// NotFoundf is NOT_FOUND.
func NotFoundf(format string, a ...any) error { return status.Errorf(codes.NotFound, format, a...) }

// Page sorts snapshots by ID and returns the page after the token. A token is the last ID of
// the previous page, which stays valid when snapshots come and go between pages; validToken
// rejects strings this driver never issued (ABORTED, as the spec asks).
func Page(all []*csi.Snapshot, token string, max int32, validToken func(string) bool) (*csi.ListSnapshotsResponse, error) {
	if max < 0 {
		return nil, status.Error(codes.InvalidArgument, "max_entries is negative")
	}
	if token != "" && !validToken(token) {
		return nil, status.Errorf(codes.Aborted, "starting_token %q is not a token this driver issued", token)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].GetSnapshotId() < all[j].GetSnapshotId() })
	start := sort.Search(len(all), func(i int) bool { return all[i].GetSnapshotId() > token })
	all = all[start:]
	resp := &csi.ListSnapshotsResponse{}
	if n := int(max); n > 0 && len(all) > n {
		all = all[:n]
		resp.NextToken = all[n-1].GetSnapshotId()
	}
	for _, s := range all {
		resp.Entries = append(resp.Entries, &csi.ListSnapshotsResponse_Entry{Snapshot: s})
	}
	return resp, nil
}

// Capabilities builds a ControllerGetCapabilities response.
func Capabilities(types ...csi.ControllerServiceCapability_RPC_Type) *csi.ControllerGetCapabilitiesResponse {
	resp := &csi.ControllerGetCapabilitiesResponse{}
	for _, t := range types {
		resp.Capabilities = append(resp.Capabilities, &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{
			Rpc: &csi.ControllerServiceCapability_RPC{Type: t}}})
	}
	return resp
}

// Permanent reports whether a create failed for a reason a retry of the same request cannot
// overcome: the request is invalid (INVALID_ARGUMENT, OUT_OF_RANGE, or Ceph's EINVAL) or names
// something that does not exist (NOT_FOUND, ENOENT). Such a create must not keep its name
// reserved; deadlines, lost races and unreachable clusters are not permanent.
func Permanent(err error) bool {
	if s, ok := status.FromError(err); ok {
		switch s.Code() {
		case codes.InvalidArgument, codes.NotFound, codes.OutOfRange:
			return true
		}
		return false
	}
	return errors.Is(err, ceph.ErrInvalid) || errors.Is(err, ceph.ErrNotFound)
}

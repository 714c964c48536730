package fence

import (
	"context"

	fencepb "github.com/csi-addons/spec/lib/go/fence"
	identitypb "github.com/csi-addons/spec/lib/go/identity"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Identity is the csi-addons Identity service of a process serving FenceController.
type Identity struct {
	identitypb.UnimplementedIdentityServer
	name, version string
	ready         func() bool
	caps          []*identitypb.Capability
}

// NewIdentity describes fc: the controller service and network fencing, plus
// GET_CLIENTS_TO_FENCE where fc answers GetFenceClients. ready backs Probe, which reports
// the plugin itself, never Ceph (as CSI Probe does).
func NewIdentity(name, version string, ready func() bool, fc *Server) *Identity {
	caps := []*identitypb.Capability{
		{Type: &identitypb.Capability_Service_{Service: &identitypb.Capability_Service{
			Type: identitypb.Capability_Service_CONTROLLER_SERVICE}}},
		{Type: &identitypb.Capability_NetworkFence_{NetworkFence: &identitypb.Capability_NetworkFence{
			Type: identitypb.Capability_NetworkFence_NETWORK_FENCE}}},
	}
	if fc.ServesFenceClients() {
		caps = append(caps, &identitypb.Capability{Type: &identitypb.Capability_NetworkFence_{NetworkFence: &identitypb.Capability_NetworkFence{
			Type: identitypb.Capability_NetworkFence_GET_CLIENTS_TO_FENCE}}})
	}
	return &Identity{name: name, version: version, ready: ready, caps: caps}
}

// GetIdentity names the driver.
func (s *Identity) GetIdentity(context.Context, *identitypb.GetIdentityRequest) (*identitypb.GetIdentityResponse, error) {
	return &identitypb.GetIdentityResponse{Name: s.name, VendorVersion: s.version}, nil
}

// GetCapabilities lists what this process serves.
func (s *Identity) GetCapabilities(context.Context, *identitypb.GetCapabilitiesRequest) (*identitypb.GetCapabilitiesResponse, error) {
	return &identitypb.GetCapabilitiesResponse{Capabilities: s.caps}, nil
}

// Probe reports readiness of the plugin.
func (s *Identity) Probe(context.Context, *identitypb.ProbeRequest) (*identitypb.ProbeResponse, error) {
	return &identitypb.ProbeResponse{Ready: wrapperspb.Bool(s.ready())}, nil
}

// Register adds the csi-addons Identity and FenceController services to a gRPC server.
func Register(r grpc.ServiceRegistrar, id *Identity, fc *Server) {
	identitypb.RegisterIdentityServer(r, id)
	fencepb.RegisterFenceControllerServer(r, fc)
}

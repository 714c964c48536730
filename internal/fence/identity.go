package fence

import (
	"context"

	fencepb "github.com/csi-addons/spec/lib/go/fence"
	identitypb "github.com/csi-addons/spec/lib/go/identity"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Identity is the csi-addons Identity service of a process: it advertises the capabilities
// of the csi-addons services registered beside it (FenceController here, ReclaimSpace in the
// RBD packages), each service naming its own.
type Identity struct {
	identitypb.UnimplementedIdentityServer
	name, version string
	ready         func() bool
	caps          []*identitypb.Capability
}

// NewIdentity advertises caps, the capabilities of the services served with it. ready backs
// Probe, which reports the plugin itself, never Ceph (as CSI Probe does).
func NewIdentity(name, version string, ready func() bool, caps ...*identitypb.Capability) *Identity {
	return &Identity{name: name, version: version, ready: ready, caps: caps}
}

// ServiceCapability is the capability of serving the controller or the node side of the
// csi-addons services.
func ServiceCapability(t identitypb.Capability_Service_Type) *identitypb.Capability {
	return &identitypb.Capability{Type: &identitypb.Capability_Service_{Service: &identitypb.Capability_Service{Type: t}}}
}

// Capabilities are fc's: network fencing, plus GET_CLIENTS_TO_FENCE where fc answers
// GetFenceClients.
func (s *Server) Capabilities() []*identitypb.Capability {
	caps := []*identitypb.Capability{
		{Type: &identitypb.Capability_NetworkFence_{NetworkFence: &identitypb.Capability_NetworkFence{
			Type: identitypb.Capability_NetworkFence_NETWORK_FENCE}}},
	}
	if s.ServesFenceClients() {
		caps = append(caps, &identitypb.Capability{Type: &identitypb.Capability_NetworkFence_{NetworkFence: &identitypb.Capability_NetworkFence{
			Type: identitypb.Capability_NetworkFence_GET_CLIENTS_TO_FENCE}}})
	}
	return caps
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

// Register adds the csi-addons FenceController service to a gRPC server.
func Register(r grpc.ServiceRegistrar, fc *Server) {
	fencepb.RegisterFenceControllerServer(r, fc)
}

// RegisterIdentity adds the csi-addons Identity service to a gRPC server.
func RegisterIdentity(r grpc.ServiceRegistrar, id *Identity) {
	identitypb.RegisterIdentityServer(r, id)
}

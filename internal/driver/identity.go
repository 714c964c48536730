package driver

import (
	"context"
	"sync/atomic"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// identity is the CSI Identity service. Its capabilities are what this process really
// registered, so a node-only plugin never claims a controller.
type identity struct {
	csi.UnimplementedIdentityServer
	name, version string
	caps          []*csi.PluginCapability
	ready         *atomic.Bool
}

func serviceCap(t csi.PluginCapability_Service_Type) *csi.PluginCapability {
	return &csi.PluginCapability{Type: &csi.PluginCapability_Service_{
		Service: &csi.PluginCapability_Service{Type: t},
	}}
}

func expansionCap(t csi.PluginCapability_VolumeExpansion_Type) *csi.PluginCapability {
	return &csi.PluginCapability{Type: &csi.PluginCapability_VolumeExpansion_{
		VolumeExpansion: &csi.PluginCapability_VolumeExpansion{Type: t},
	}}
}

func (s *identity) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: s.name, VendorVersion: s.version}, nil
}

func (s *identity) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{Capabilities: s.caps}, nil
}

// Probe reports readiness of the plugin itself, never of Ceph (see package health).
func (s *identity) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(s.ready.Load())}, nil
}

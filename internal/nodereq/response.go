package nodereq

import (
	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Capabilities is the NodeGetCapabilities answer of a service with the RPCs rpcs.
func Capabilities(rpcs ...csi.NodeServiceCapability_RPC_Type) *csi.NodeGetCapabilitiesResponse {
	var caps []*csi.NodeServiceCapability
	for _, t := range rpcs {
		caps = append(caps, &csi.NodeServiceCapability{
			Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: t}},
		})
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: caps}
}

// Health is the NodeGetVolumeHealth answer for a volume: healthy when reason is "", else
// INACCESSIBLE from this node with reason (a CamelCase word) and msg.
func Health(volumeID, reason, msg string) *csi.NodeGetVolumeHealthResponse {
	health := &csi.VolumeHealth{VolumeId: volumeID}
	if reason != "" {
		health.HealthStatuses = []*csi.VolumeHealth_VolumeHealthEntry{{
			Status: csi.VolumeHealthErrorType_INACCESSIBLE, Reason: reason, Message: msg,
		}}
	}
	return &csi.NodeGetVolumeHealthResponse{VolumeHealth: health}
}

// Status converts an error from a call's work into a status naming what failed, with the code
// classify gives it. nil stays nil and a status stays as it is: it already says what failed.
func Status(what string, err error, classify func(error) codes.Code) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Errorf(classify(err), "%s: %v", what, err)
}

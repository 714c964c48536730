package driver

import "github.com/container-storage-interface/spec/lib/go/csi"

// registerGroupController serves a controller's CSI GroupController (group snapshots) on the
// CSI socket, where csi-snapshotter finds it, and returns the capability advertising it.
func (d *Driver) registerGroupController(s csi.GroupControllerServer) *csi.PluginCapability {
	csi.RegisterGroupControllerServer(d.grpc.Server, s)
	return serviceCap(csi.PluginCapability_Service_GROUP_CONTROLLER_SERVICE)
}

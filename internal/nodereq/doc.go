// Package nodereq is the CSI request handling the RBD and CephFS node services share: it
// checks requests in the order of the CSI spec, starts each call under its volume's lock with a
// logger naming it, and builds the answers that do not depend on the backend (capabilities,
// health, an error's status).
//
// Checks follow the order of the fields in the spec, so the first missing one is the one
// named, with the spec's codes and the field named as the spec names it: volume_id, then the
// paths (in NodePublishVolume target_path before volume_capability, staging_target_path after
// it, FAILED_PRECONDITION when missing), then volume_capability.
package nodereq

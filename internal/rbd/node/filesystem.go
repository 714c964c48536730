package node

import (
	"context"
	"fmt"

	"github.com/monoceph/monoceph/internal/hostexec"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// formatAndMount makes a filesystem of fsType on a blank device, or checks the one the device
// holds, and mounts it at target.
//
// mount-utils' FormatAndMount runs fsck too, but mounts anyway unless fsck reports exactly
// "errors left uncorrected" (4): an fsck that was killed (timeout) or failed to run (8: the
// device is mounted elsewhere, an unsupported feature...) is logged and the filesystem mounted
// unchecked. Here a formatted device is checked first and any such failure fails the stage;
// mount-utils only formats blank devices.
func (s *Server) formatAndMount(ctx context.Context, dev, target, fsType string, readOnly bool, opts, formatOpts []string) error {
	f := s.formatter(ctx)
	existing, err := f.GetDiskFormat(dev)
	if err != nil {
		return errorStatus("reading the filesystem type of "+dev, err)
	}
	what := fmt.Sprintf("mounting %s (%s) at %s", dev, fsType, target)
	if existing == "" {
		// mkfs, then mount; a new filesystem needs no check
		return errorStatus(what, f.FormatAndMountSensitiveWithFormatOptions(dev, target, fsType, opts, nil, formatOpts))
	}
	if !readOnly {
		// as mount-utils: fsck may repair, and a read-only staging must not write
		if err := s.checkFilesystem(ctx, dev); err != nil {
			return err
		}
	}
	// mount -t fsType: a device holding another filesystem fails here, as in mount-utils
	return errorStatus(what, f.Mount(dev, target, fsType, opts))
}

// fsck(8) exit statuses: bits of what happened.
const (
	fsckCorrected       = 1 // errors found and corrected
	fsckCorrectedReboot = 2 // corrected; a mounted root filesystem should be rebooted
	fsckUncorrected     = 4 // errors left uncorrected
)

// checkFilesystem runs fsck -a (repair what is safe to repair without asking) on dev. Errors it
// corrected are logged; errors it left, an fsck that failed to run (exit 8 and up) and one that
// did not finish (killed at Options.FilesystemTimeout or with the RPC) fail the stage.
func (s *Server) checkFilesystem(ctx context.Context, dev string) error {
	out, err := s.fsx.Run(ctx, "fsck", "-a", dev)
	if err == nil {
		return nil
	}
	switch code := hostexec.ExitCode(err); {
	case code > 0 && code&^(fsckCorrected|fsckCorrectedReboot) == 0:
		klog.FromContext(ctx).Info("fsck corrected errors on the filesystem", "device", dev, "exitStatus", code, "output", string(out))
		return nil
	case code > 0 && code&^(fsckCorrected|fsckCorrectedReboot|fsckUncorrected) == 0:
		return status.Errorf(codes.FailedPrecondition, "the filesystem on %s has errors fsck -a could not correct; not mounting it (repair it with fsck first): %v", dev, err)
	}
	return errorStatus("checking the filesystem on "+dev+" (not mounting it unchecked)", err)
}

package volcap

import (
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func mountCap(m csi.VolumeCapability_AccessMode_Mode, fs string) *csi.VolumeCapability {
	return &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: m},
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fs}}}
}

func blockCap(m csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	return &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: m},
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}}
}

func TestCheck(t *testing.T) {
	const (
		snw = csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
		mnr = csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
		mnw = csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
	)
	s := Support{Block: true,
		MountModes: map[csi.VolumeCapability_AccessMode_Mode]bool{snw: true, mnr: true},
		BlockModes: map[csi.VolumeCapability_AccessMode_Mode]bool{snw: true, mnw: true},
		FsTypes:    map[string]bool{"ext4": true}}
	tests := []struct {
		caps []*csi.VolumeCapability
		want string
	}{
		{[]*csi.VolumeCapability{mountCap(snw, "")}, ""},
		{[]*csi.VolumeCapability{mountCap(snw, "ext4"), blockCap(mnw)}, ""},
		{[]*csi.VolumeCapability{mountCap(mnw, "")}, "volume_capabilities[0]: access mode MULTI_NODE_MULTI_WRITER is not supported with mount access"},
		{[]*csi.VolumeCapability{mountCap(snw, ""), mountCap(snw, "zfs")}, `volume_capabilities[1]: fs_type "zfs"`},
		{[]*csi.VolumeCapability{{AccessMode: &csi.VolumeCapability_AccessMode{Mode: snw}}}, "access_type is missing"},
		{[]*csi.VolumeCapability{{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}}}, "access_mode is missing"},
		{[]*csi.VolumeCapability{nil}, "capability is empty"},
	}
	for i, tt := range tests {
		got := s.Check(tt.caps)
		if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("%d: Check = %q, want %q", i, got, tt.want)
		}
	}
	if err := s.Validate(nil); status.Code(err) != codes.InvalidArgument {
		t.Errorf("Validate(nil) = %v", err)
	}
	if !ReadOnly([]*csi.VolumeCapability{mountCap(mnr, "")}) || ReadOnly([]*csi.VolumeCapability{mountCap(mnr, ""), mountCap(snw, "")}) || ReadOnly(nil) {
		t.Error("ReadOnly wrong")
	}
}

func TestSize(t *testing.T) {
	tests := []struct {
		req, lim, want int64
		code           codes.Code
	}{
		{0, 0, 1 << 30, codes.OK},
		{1, 0, MiB, codes.OK},
		{MiB + 1, 0, 2 * MiB, codes.OK},
		{0, 10 * MiB, 10 * MiB, codes.OK},
		{0, 10*MiB + 5, 10 * MiB, codes.OK},
		{MiB + 1, MiB + 2, 0, codes.OutOfRange},
		{5, 1, 0, codes.InvalidArgument},
		{-1, 0, 0, codes.InvalidArgument},
		{0, 100, 0, codes.OutOfRange},
	}
	for _, tt := range tests {
		got, err := Size(&csi.CapacityRange{RequiredBytes: tt.req, LimitBytes: tt.lim}, 1<<30)
		if status.Code(err) != tt.code || got != tt.want {
			t.Errorf("Size(%d,%d) = %d, %v; want %d, %v", tt.req, tt.lim, got, err, tt.want, tt.code)
		}
	}
	if !Fits(2*MiB, &csi.CapacityRange{RequiredBytes: MiB}) || Fits(MiB, &csi.CapacityRange{RequiredBytes: 2 * MiB}) || Fits(3*MiB, &csi.CapacityRange{LimitBytes: 2 * MiB}) {
		t.Error("Fits wrong")
	}
}

package nodereq

import (
	"errors"
	"slices"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestCapabilities(t *testing.T) {
	want := []csi.NodeServiceCapability_RPC_Type{csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME, csi.NodeServiceCapability_RPC_GET_VOLUME_HEALTH}
	var got []csi.NodeServiceCapability_RPC_Type
	for _, c := range Capabilities(want...).GetCapabilities() {
		got = append(got, c.GetRpc().GetType())
	}
	if !slices.Equal(got, want) {
		t.Fatalf("capabilities %v, want %v", got, want)
	}
}

func TestHealth(t *testing.T) {
	if h := Health("v", "", "").GetVolumeHealth(); h.GetVolumeId() != "v" || len(h.GetHealthStatuses()) != 0 {
		t.Fatalf("healthy volume: %v", h)
	}
	h := Health("v", "MountBroken", "the fuse mount at /s is broken").GetVolumeHealth()
	if h.GetVolumeId() != "v" || len(h.GetHealthStatuses()) != 1 {
		t.Fatalf("broken volume: %v", h)
	}
	if e := h.GetHealthStatuses()[0]; e.GetStatus() != csi.VolumeHealthErrorType_INACCESSIBLE || e.GetReason() != "MountBroken" || e.GetMessage() != "the fuse mount at /s is broken" {
		t.Fatalf("entry %v", e)
	}
}

func TestStatus(t *testing.T) {
	notFound := func(error) codes.Code { return codes.NotFound }
	if err := Status("mounting", nil, notFound); err != nil {
		t.Fatalf("Status(nil) = %v", err)
	}
	st := status.Error(codes.Aborted, "busy")
	if err := Status("mounting", st, notFound); err != st {
		t.Fatalf("Status(a status) = %v, want it unchanged", err)
	}
	wantCode(t, "plain error", Status("mounting /s", errors.New("no such image"), notFound), codes.NotFound, "mounting /s: no such image")
}

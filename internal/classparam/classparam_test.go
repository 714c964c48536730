package classparam

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestUnknownParams(t *testing.T) {
	if err := UnknownParams(map[string]string{"pool": "x", "csi.storage.k8s.io/fstype": "ext4"}, "pool"); err != nil {
		t.Fatal(err)
	}
	err := UnknownParams(map[string]string{"Pool": "x"}, "pool")
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `"Pool"`) {
		t.Fatalf("err = %v", err)
	}
}

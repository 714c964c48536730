package topopool

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestParseTopologyPools(t *testing.T) {
	for _, bad := range []string{`[]`, `{}`, `[{"poolName":"p"}]`, `[{"poolName":"","domainSegments":[{"domainLabel":"zone","value":"z"}]}]`,
		`[{"poolName":"p","domainSegments":[{"domainLabel":"zone"}]}]`, `[{"poolName":"p","x":1,"domainSegments":[{"domainLabel":"zone","value":"z"}]}]`} {
		if _, err := Parse(bad); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", bad, err)
		}
	}
}

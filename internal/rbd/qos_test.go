package rbd

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestParseQoS(t *testing.T) {
	tests := []struct {
		name    string
		in      map[string]string
		want    qos
		errName string // the parameter INVALID_ARGUMENT must name
	}{
		{"none", nil, qos{}, ""},
		{"iops", map[string]string{"qosWriteIopsLimit": "100"}, qos{"rbd_qos_write_iops_limit": 100}, ""},
		{"bytes as quantity", map[string]string{"qosBpsLimit": "100Mi", "qosReadBpsLimit": "1000000"},
			qos{"rbd_qos_bps_limit": 100 << 20, "rbd_qos_read_bps_limit": 1000000}, ""},
		{"burst and seconds", map[string]string{"qosIopsLimit": "100", "qosIopsBurst": "500", "qosIopsBurstSeconds": "3"},
			qos{"rbd_qos_iops_limit": 100, "rbd_qos_iops_burst": 500, "rbd_qos_iops_burst_seconds": 3}, ""},
		{"zero means unlimited", map[string]string{"qosIopsLimit": "0"}, qos{"rbd_qos_iops_limit": 0}, ""},
		{"unknown key", map[string]string{"XXX_FakeKey": "1"}, nil, "XXX_FakeKey"},
		{"librbd's own name is not ours", map[string]string{"rbd_qos_iops_limit": "1"}, nil, "rbd_qos_iops_limit"},
		{"negative", map[string]string{"qosIopsLimit": "-5"}, nil, "qosIopsLimit"},
		{"not a number", map[string]string{"qosIopsLimit": "fast"}, nil, "qosIopsLimit"},
		{"iops as quantity", map[string]string{"qosIopsLimit": "1k"}, nil, "qosIopsLimit"},
		{"fractional bytes", map[string]string{"qosBpsLimit": "0.5"}, nil, "qosBpsLimit"},
		{"negative bytes", map[string]string{"qosBpsLimit": "-1Mi"}, nil, "qosBpsLimit"},
		{"zero burst seconds", map[string]string{"qosIopsBurstSeconds": "0"}, nil, "qosIopsBurstSeconds"},
		{"burst below limit", map[string]string{"qosWriteIopsLimit": "100", "qosWriteIopsBurst": "50"}, nil, "qosWriteIopsBurst"},
		{"burst below limit, bytes", map[string]string{"qosBpsLimit": "10Mi", "qosBpsBurst": "1Mi"}, nil, "qosBpsBurst"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseQoS(tt.in)
			if tt.errName != "" {
				if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `mutable_parameters["`+tt.errName+`"]`) {
					t.Fatalf("err = %v, want INVALID_ARGUMENT naming %s", err, tt.errName)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Fatalf("got %v, want %v", got, tt.want)
				}
			}
		})
	}
}

package server

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/logtest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"k8s.io/klog/v2"
)

const (
	secretKey   = "AQAAAAAAAAAAABAAbW9ub2NlcGgtc2VjcmV0IQ=="
	secretToken = "eyJhbGciOiJSUzI1NiJ9.SECRET-TOKEN"
)

// leaky is a controller whose handlers do everything a careless handler might: format the
// credentials into errors, log the request, panic.
type leaky struct {
	csi.UnimplementedControllerServer
}

func (leaky) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	cred, err := ceph.CredentialsFromSecrets(req.GetSecrets())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	klog.FromContext(ctx).V(6).Info("handler sees", "cred", cred, "credStruct", fmt.Sprintf("%+v", struct{ c ceph.Credentials }{cred}))
	if req.GetName() == "fail" {
		return nil, fmt.Errorf("cannot create for %v: %w", cred, ceph.NewError("rbd create", ceph.ErrNoSpace, ""))
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: "vol-" + req.GetName(), CapacityBytes: 1 << 20}}, nil
}

func (leaky) DeleteVolume(context.Context, *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	panic("handler bug")
}

func startServer(t *testing.T, reg *prometheus.Registry) csi.ControllerClient {
	sock := filepath.Join(t.TempDir(), "csi.sock")
	g, err := NewGRPC("unix://"+sock, NewMetrics(reg))
	if err != nil {
		t.Fatal(err)
	}
	csi.RegisterControllerServer(g.Server, leaky{})
	go func() { _ = g.Serve() }()
	t.Cleanup(func() { g.Shutdown(time.Second) })
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return csi.NewControllerClient(conn)
}

func TestNoSecretInLogsAtHighestVerbosity(t *testing.T) {
	logs := logtest.Capture(t, 10)
	reg := prometheus.NewRegistry()
	c := startServer(t, reg)
	ctx := metadata.AppendToOutgoingContext(context.Background(), RequestIDHeader, "req-under-test")
	secrets := map[string]string{"userID": "admin", "userKey": secretKey}

	if _, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "ok", Secrets: secrets,
		Parameters: map[string]string{"pool": "rbd"}}); err != nil {
		t.Fatal(err)
	}
	_, err := c.CreateVolume(context.Background(), &csi.CreateVolumeRequest{Name: "fail", Secrets: secrets})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("domain error mapped to %v, want ResourceExhausted", status.Code(err))
	}
	if strings.Contains(err.Error(), secretKey) {
		t.Fatalf("secret in the error returned to the caller: %v", err)
	}
	_, err = c.CreateVolume(context.Background(), &csi.CreateVolumeRequest{Name: "bad", Secrets: map[string]string{"userID": "admin", "userKey": "x" + secretKey + "!"}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad key: %v", err)
	}
	_, err = c.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: "v", Secrets: secrets})
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "panicked") {
		t.Fatalf("panic mapped to %v", err)
	}
	out := logs.String()

	// The log must really hold the requests, so that the check below cannot pass vacuously.
	for _, want := range []string{`requestID="req-under-test"`, `\"name\":\"ok\"`, `\"pool\":\"rbd\"`, "***stripped***",
		"RPC failed", "Handler panicked", "vol-ok", "handler sees"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q", want)
		}
	}
	if leaks := logtest.Leaks(out, secretKey); len(leaks) > 0 {
		t.Errorf("secret %q found in logs:\n%s", leaks, out)
	}
	if t.Failed() {
		t.Logf("captured logs:\n%s", out)
	}

	// metrics counted every call with its code
	for _, tc := range []struct {
		method, code string
		want         float64
	}{{"CreateVolume", "OK", 1}, {"CreateVolume", "ResourceExhausted", 1}, {"CreateVolume", "InvalidArgument", 1}, {"DeleteVolume", "Internal", 1}} {
		got := testutil.ToFloat64(mustCounter(t, reg, tc.method, tc.code))
		if got != tc.want {
			t.Errorf("requests{%s,%s} = %v, want %v", tc.method, tc.code, got, tc.want)
		}
	}
}

func mustCounter(t *testing.T, reg *prometheus.Registry, method, code string) prometheus.Collector {
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "monoceph_grpc_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["method"] == method && labels["code"] == code && labels["service"] == "csi.v1.Controller" {
				g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "x"})
				g.Set(m.GetCounter().GetValue())
				return g
			}
		}
	}
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: "x"})
}

// tokenRequest builds a message shaped like the Kubernetes-facing snapshot metadata API's
// requests, whose security_token carries no csi_secret option.
func tokenRequest(t *testing.T) proto.Message {
	fdp := &descriptorpb.FileDescriptorProto{
		Name:    proto.String("token_test.proto"),
		Package: proto.String("test"),
		Syntax:  proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{
			Name: proto.String("GetMetadataDeltaRequest"),
			Field: []*descriptorpb.FieldDescriptorProto{
				{Name: proto.String("security_token"), Number: proto.Int32(1), Type: descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum(), JsonName: proto.String("securityToken")},
				{Name: proto.String("namespace"), Number: proto.Int32(2), Type: descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum(), JsonName: proto.String("namespace")},
			},
		}},
	}
	fd, err := protodesc.NewFile(fdp, nil)
	if err != nil {
		t.Fatal(err)
	}
	msg := dynamicpb.NewMessage(fd.Messages().Get(0))
	msg.Set(fd.Messages().Get(0).Fields().ByName("security_token"), protoValue(secretToken))
	msg.Set(fd.Messages().Get(0).Fields().ByName("namespace"), protoValue("backup-ns"))
	return msg
}

func TestRedactSecurityToken(t *testing.T) {
	msg := tokenRequest(t)
	out := Redact(msg).String()
	if strings.Contains(out, "SECRET-TOKEN") || !strings.Contains(out, "backup-ns") || !strings.Contains(out, "***stripped***") {
		t.Fatalf("Redact = %s", out)
	}
	// the original request is untouched: the handler still needs the token
	if !strings.Contains(fmt.Sprint(msg), "SECRET-TOKEN") {
		t.Fatal("Redact modified the request itself")
	}
}

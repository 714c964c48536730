package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/kubernetes-csi/csi-lib-utils/protosanitizer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"k8s.io/klog/v2"
)

// RequestIDHeader is the metadata key a caller may set to correlate its logs with ours.
const RequestIDHeader = "x-request-id"

// Log verbosity of request and response bodies: the request at 4 (enough to replay a
// failure), the response at 5 (can be large, e.g. ListSnapshots).
const (
	vRequest  = 4
	vResponse = 5
)

// fieldsAlwaysSecret are redacted whatever the message: fields that carry credentials in APIs
// that do not use the CSI csi_secret option (the Kubernetes-facing snapshot metadata API).
var fieldsAlwaysSecret = map[protoreflect.Name]bool{"security_token": true}

type requestIDKey struct{}

// RequestID returns the ID the interceptors gave the request in ctx, or "".
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

func newRequestID(ctx context.Context) string {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(RequestIDHeader); len(v) > 0 && len(v[0]) > 0 && len(v[0]) <= 64 {
			return v[0]
		}
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Redact returns a value whose String() is req as JSON with every secret replaced: CSI fields
// marked csi_secret (through csi-lib-utils' protosanitizer) and fieldsAlwaysSecret.
func Redact(req any) fmt.Stringer {
	if msg, ok := req.(proto.Message); ok && hasAlwaysSecret(msg.ProtoReflect()) {
		c := proto.Clone(msg)
		stripAlwaysSecret(c.ProtoReflect())
		req = c
	}
	return protosanitizer.StripSecrets(req)
}

func hasAlwaysSecret(m protoreflect.Message) bool {
	found := false
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fieldsAlwaysSecret[fd.Name()] || (fd.Kind() == protoreflect.MessageKind && !fd.IsList() && !fd.IsMap() && hasAlwaysSecret(v.Message())) {
			found = true
		}
		return !found
	})
	return found
}

func stripAlwaysSecret(m protoreflect.Message) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fieldsAlwaysSecret[fd.Name()] && fd.Kind() == protoreflect.StringKind && !fd.IsList() && !fd.IsMap():
			m.Set(fd, protoreflect.ValueOfString("***stripped***"))
		case fieldsAlwaysSecret[fd.Name()]:
			m.Clear(fd)
		case fd.Kind() == protoreflect.MessageKind && !fd.IsList() && !fd.IsMap():
			stripAlwaysSecret(v.Message())
		}
		return true
	})
}

// begin gives the call its request ID and logger; every handler logs through
// klog.FromContext(ctx) and so carries both.
func begin(ctx context.Context, method string) (context.Context, klog.Logger) {
	id := newRequestID(ctx)
	logger := klog.FromContext(ctx).WithValues("method", method, "requestID", id)
	ctx = context.WithValue(ctx, requestIDKey{}, id)
	return klog.NewContext(ctx, logger), logger
}

// recovered turns a panic into INTERNAL: one bad request must not take every volume's node
// plugin (and its FUSE mounts) down with it.
func recovered(logger klog.Logger, r any) error {
	logger.Error(fmt.Errorf("panic: %v", r), "Handler panicked", "stack", string(debug.Stack()))
	return status.Errorf(codes.Internal, "internal error: handler panicked: %v", r)
}

// serverFault are the codes that mean the driver or Ceph failed, not the request: they are
// logged as errors; the rest (bad input, not found, retry later) as information.
var serverFault = map[codes.Code]bool{codes.Internal: true, codes.Unknown: true, codes.DataLoss: true,
	codes.Unavailable: true, codes.DeadlineExceeded: true, codes.Unimplemented: true}

func finish(logger klog.Logger, err error, start time.Time) error {
	err = ToStatus(err)
	switch {
	case err != nil && serverFault[status.Code(err)]:
		logger.Error(err, "RPC failed", "code", status.Code(err), "duration", time.Since(start))
	case err != nil:
		logger.Info("RPC failed", "err", err, "code", status.Code(err), "duration", time.Since(start))
	default:
		logger.V(vRequest).Info("RPC succeeded", "duration", time.Since(start))
	}
	return err
}

// UnaryInterceptor wires request ID, logging, redaction, panic recovery and metrics into every
// unary RPC.
func UnaryInterceptor(m *Metrics) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		start := time.Now()
		done := m.begin(info.FullMethod)
		ctx, logger := begin(ctx, info.FullMethod)
		logger.V(vRequest).Info("RPC called", "request", Redact(req))
		defer func() {
			if r := recover(); r != nil {
				resp, err = nil, recovered(logger, r)
			}
			err = finish(logger, err, start)
			done(status.Code(err))
			if err == nil {
				logger.V(vResponse).Info("RPC response", "response", Redact(resp))
			}
		}()
		return handler(ctx, req)
	}
}

type loggedStream struct {
	grpc.ServerStream
	ctx    context.Context
	logger klog.Logger
	sent   int
}

func (s *loggedStream) Context() context.Context { return s.ctx }

func (s *loggedStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil {
		s.logger.V(vRequest).Info("RPC called", "request", Redact(m))
	}
	return err
}

func (s *loggedStream) SendMsg(m any) error {
	s.sent++
	return s.ServerStream.SendMsg(m)
}

// StreamInterceptor is UnaryInterceptor for streaming RPCs (SnapshotMetadata).
func StreamInterceptor(m *Metrics) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		start := time.Now()
		done := m.begin(info.FullMethod)
		ctx, logger := begin(ss.Context(), info.FullMethod)
		ls := &loggedStream{ServerStream: ss, ctx: ctx, logger: logger}
		defer func() {
			if r := recover(); r != nil {
				err = recovered(logger, r)
			}
			err = finish(logger.WithValues("messagesSent", ls.sent), err, start)
			done(status.Code(err))
		}()
		return handler(srv, ls)
	}
}

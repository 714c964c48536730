// Package server is the gRPC and HTTP plumbing every monoceph service runs on: unix-socket
// listeners, interceptors (request ID, request-scoped logger, redacted request logging, panic
// recovery, Prometheus metrics), per-volume operation locks and the one place domain errors
// become gRPC status codes.
package server

// Package server is the gRPC and HTTP plumbing every monoceph service runs on: unix-socket
// listeners, interceptors (request ID, request-scoped logger, redacted request logging, panic
// recovery, Prometheus metrics) and the status of domain errors (the codes of Ceph's error
// classes are a column of ceph.Classes). The operation locks (internal/oplock) and endpoint
// parsing (internal/endpoint) are leaves of their own, so that services use them without this
// plumbing.
package server

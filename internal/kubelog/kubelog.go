// Package kubelog caps the verbosity of client-go's logging, which follows the logger of each
// call's context: from -v=8 on, client-go logs request and response bodies, and those carry
// bearer tokens (TokenReview, TokenRequest) and the Ceph keys of the Secrets monoceph reads.
// monoceph's own -v is unaffected.
package kubelog

import (
	"context"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

// MaxVerbosity is the most client-go may log: at 6 it logs URLs and timing, at 7 headers (with
// credentials masked), at 8 bodies.
const MaxVerbosity = 6

// Context returns ctx with its logger (klog's global one when it has none) capped at
// MaxVerbosity. Every client-go call monoceph makes takes a context from here.
func Context(ctx context.Context) context.Context {
	l := klog.FromContext(ctx)
	if _, ok := l.GetSink().(capped); ok {
		return ctx
	}
	return klog.NewContext(ctx, logr.New(newCapped(l.GetSink(), MaxVerbosity)).V(l.GetV()))
}

// capped is a LogSink that drops everything above max.
type capped struct {
	logr.LogSink
	max int
}

func newCapped(s logr.LogSink, max int) capped {
	// one frame more between the caller and the real sink: keep klog's file:line the caller's
	if cd, ok := s.(logr.CallDepthLogSink); ok {
		s = cd.WithCallDepth(1)
	}
	return capped{LogSink: s, max: max}
}

// Init does nothing: the wrapped sink was initialised by its own logger, and klog's sink
// would add the call depth to itself a second time.
func (capped) Init(logr.RuntimeInfo) {}

func (c capped) Enabled(level int) bool { return level <= c.max && c.LogSink.Enabled(level) }

func (c capped) Info(level int, msg string, kv ...any) {
	if level <= c.max {
		c.LogSink.Info(level, msg, kv...)
	}
}

func (c capped) WithValues(kv ...any) logr.LogSink {
	return capped{LogSink: c.LogSink.WithValues(kv...), max: c.max}
}

func (c capped) WithName(name string) logr.LogSink {
	return capped{LogSink: c.LogSink.WithName(name), max: c.max}
}

func (c capped) WithCallDepth(depth int) logr.LogSink {
	if cd, ok := c.LogSink.(logr.CallDepthLogSink); ok {
		return capped{LogSink: cd.WithCallDepth(depth), max: c.max}
	}
	return c
}

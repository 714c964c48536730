// Package linger lets work that outlives its caller keep what the caller held.
//
// A librados call cannot be cancelled: when an RPC's deadline passes, ceph.Call returns to the
// caller and leaves the call running in the background until librados' own timeouts end it.
// The caller's operation lock must stay taken until then, or the CO's retry of the same
// request would race the abandoned call inside librbd (a retried delete reported success
// while the first one was still removing the image, and left a stub behind).
package linger

import "context"

type key struct{}

// With returns ctx carrying hold: a function that takes a reference on what the caller holds
// and returns the function that drops it.
func With(ctx context.Context, hold func() (release func())) context.Context {
	return context.WithValue(ctx, key{}, hold)
}

// Hold takes a reference on what ctx's caller holds, for work that goes on after the caller
// returns; the work calls the returned function when it ends. Without a holder in ctx it does
// nothing.
func Hold(ctx context.Context) (release func()) {
	if hold, ok := ctx.Value(key{}).(func() func()); ok {
		return hold()
	}
	return func() {}
}

// Without returns ctx without its holder: for an operation whose abandoned calls something
// else keeps a retry from racing (a lock in the cluster the abandoned work holds until it
// ends), so that the caller's lock is free as soon as the caller returns.
func Without(ctx context.Context) context.Context {
	return context.WithValue(ctx, key{}, nil)
}

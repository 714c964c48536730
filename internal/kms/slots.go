package kms

import "context"

// MaxKDF is how many LUKS2 formats and key loads a process runs at once: each runs librbd's
// argon2id PBKDF, which takes up to 1 GiB of memory and about 2 s of CPU.
const MaxKDF = 2

var kdfSlots = make(chan struct{}, MaxKDF)

// WithKDFSlot runs fn once fewer than MaxKDF others run (controller formats and node loads
// share the slots: in one process they share its memory). Waiting for a slot ends with ctx.
func WithKDFSlot(ctx context.Context, fn func() error) error {
	select {
	case kdfSlots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-kdfSlots }()
	return fn()
}

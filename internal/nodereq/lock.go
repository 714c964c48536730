package nodereq

import (
	"context"

	"github.com/monoceph/monoceph/internal/oplock"
	"k8s.io/klog/v2"
)

// Lock takes the operation lock of volumeID for the call op (ABORTED when another operation
// holds it) and returns ctx with a logger naming the volume and keysAndValues, that logger,
// and the function that releases the lock.
func Lock(ctx context.Context, locks *oplock.Locks, op, volumeID string, keysAndValues ...any) (context.Context, klog.Logger, func(), error) {
	ctx, unlock, err := locks.TryLockContext(ctx, op, volumeID)
	if err != nil {
		return ctx, klog.Logger{}, nil, err
	}
	log := klog.FromContext(ctx).WithValues(append([]any{"volumeID", volumeID}, keysAndValues...)...)
	return klog.NewContext(ctx, log), log, unlock, nil
}

package nodereq

import (
	"context"
	"errors"
	"maps"
	"math"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

// DefaultRecoverBackoff paces RecoverAll's retries of the volumes it could not repair yet:
// 2 s, doubling to a minute.
var DefaultRecoverBackoff = wait.Backoff{Duration: 2 * time.Second, Factor: 2, Jitter: 0.1, Steps: math.MaxInt32, Cap: time.Minute}

// Repair recovers the volume of one work directory: repaired says it changed something; err
// says why it could not (yet).
type Repair func(ctx context.Context, workDir string) (repaired bool, err error)

// RecoverAll runs repair for every work directory, then again with backoff for those whose
// failure time may cure (Retryable), until all are done or ctx ends: a node plugin or mount
// holder often restarts together with the cluster or the network it reaches the cluster by.
// It returns how many were repaired and the errors of those that were not, in directory
// order. what names the recovery in the logs.
func RecoverAll(ctx context.Context, what string, dirs []string, backoff wait.Backoff, repair Repair) (int, error) {
	log := klog.FromContext(ctx)
	repaired, failed := 0, map[string]error{} // work directory → why its volume is not repaired
	for attempt := 1; ; attempt++ {
		var retry []string
		for _, dir := range dirs {
			done, err := repair(ctx, dir)
			if done {
				repaired++
			}
			delete(failed, dir)
			if err != nil {
				failed[dir] = err
				if Retryable(err) {
					retry = append(retry, dir)
				}
			}
		}
		if len(retry) == 0 {
			break
		}
		delay := backoff.Step()
		log.Info(what+": volumes not repaired yet, retrying", "attempt", attempt, "volumes", len(retry), "retryIn", delay, "err", joinSorted(failed))
		select {
		case <-ctx.Done():
			log.Info(what+" gives up", "reason", ctx.Err())
			return repaired, joinSorted(failed)
		case <-time.After(delay):
		}
		dirs = retry
	}
	return repaired, joinSorted(failed)
}

// Retryable reports whether a failed repair may succeed later without anyone acting: not when
// the request itself is wrong, the key is missing or refused, or the volume is gone.
func Retryable(err error) bool {
	switch status.Code(err) {
	case codes.FailedPrecondition, codes.InvalidArgument, codes.NotFound, codes.PermissionDenied, codes.Unauthenticated:
		return false
	}
	return true
}

// joinSorted joins the errors of m in the order of their keys.
func joinSorted(m map[string]error) error {
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(m)) {
		errs = append(errs, m[k])
	}
	return errors.Join(errs...)
}

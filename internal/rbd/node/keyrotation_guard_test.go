package node

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestLeaseClockHeld: the lock is relied on only until its last successful renewal plus the
// lease less the margin, and never again after a renewal failed.
func TestLeaseClockHeld(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name   string
		failed error
		now    time.Duration // after the last success
		held   bool
	}{
		{"fresh", nil, 0, true},
		{"within the lease less the margin", nil, 44 * time.Second, true},
		{"in the margin", nil, 45 * time.Second, false},
		{"lapsed", nil, 2 * time.Minute, false},
		{"a renewal failed", errors.New("timed out"), time.Second, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := &leaseClock{lease: time.Minute}
			l.renewed(t0, nil)
			if tt.failed != nil {
				l.renewed(t0, tt.failed)
				l.renewed(t0.Add(time.Millisecond), nil) // a later success does not revive it
			}
			err := l.held(t0.Add(tt.now))
			if (err == nil) != tt.held {
				t.Fatalf("held = %v, want held: %v", err, tt.held)
			}
			if err != nil && !errors.Is(err, errLeaseLost) {
				t.Fatalf("held = %v, want errLeaseLost", err)
			}
		})
	}
}

// TestLeaseRenewalFailureStops: the first failed renewal stops the renewals and the lock is
// not relied on from then on (a header write or Commit would answer errLeaseLost).
func TestLeaseRenewalFailureStops(t *testing.T) {
	l := &leaseClock{lease: 30 * time.Millisecond}
	l.renewed(time.Now(), nil)
	var calls atomic.Int32
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		l.renewLoop(stop, func() error {
			if calls.Add(1) == 2 {
				return errors.New("injected renewal failure")
			}
			return nil
		})
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		close(stop)
		t.Fatal("the renewals go on after one failed")
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d renewals, want 2 (the second failed)", n)
	}
	if err := l.held(time.Now()); !errors.Is(err, errLeaseLost) {
		t.Fatalf("held after a failed renewal = %v, want errLeaseLost", err)
	}
	// what the rotation sees: its next header write stops
	x := &imageHeader{lease: l}
	if err := x.Check(t.Context(), "commit"); !errors.Is(err, errLeaseLost) {
		t.Fatalf("Check = %v, want errLeaseLost", err)
	}
}

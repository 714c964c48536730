package linger

import (
	"context"
	"testing"
)

func TestHold(t *testing.T) {
	refs := 0
	ctx := With(context.Background(), func() func() {
		refs++
		return func() { refs-- }
	})
	r1, r2 := Hold(ctx), Hold(ctx)
	if refs != 2 {
		t.Fatalf("refs = %d after two holds, want 2", refs)
	}
	r1()
	r2()
	if refs != 0 {
		t.Fatalf("refs = %d after release, want 0", refs)
	}
	Hold(context.Background())() // no holder: a no-op, not a panic
	r3 := Hold(Without(ctx))     // holder removed: a no-op too
	if refs != 0 {
		t.Fatalf("refs = %d after a hold on Without(ctx), want 0", refs)
	}
	r3()
}

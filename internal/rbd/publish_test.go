package rbd

import (
	"slices"
	"testing"

	"github.com/monoceph/monoceph/internal/rbd/attachment"
)

func TestExclusiveWith(t *testing.T) {
	snw := attachment.Publication{Mode: "SINGLE_NODE_WRITER"}
	sro := attachment.Publication{Mode: "SINGLE_NODE_READER_ONLY"}
	mnmw := attachment.Publication{Mode: "MULTI_NODE_MULTI_WRITER"}
	mnro := attachment.Publication{Mode: "MULTI_NODE_READER_ONLY"}
	for _, c := range []struct {
		name     string
		existing map[string]attachment.Publication
		want     attachment.Publication
		conflict []string
	}{
		{"first node", nil, snw, nil},
		{"same node again", map[string]attachment.Publication{"a": snw}, snw, nil},
		{"second writer", map[string]attachment.Publication{"a": snw}, snw, []string{"a"}},
		{"reader beside a single-node writer", map[string]attachment.Publication{"a": snw}, mnro, []string{"a"}},
		{"single-node reader beside a reader", map[string]attachment.Publication{"a": sro}, sro, []string{"a"}},
		{"multi beside multi", map[string]attachment.Publication{"a": mnmw, "b": mnmw}, mnmw, nil},
		{"readers share", map[string]attachment.Publication{"a": mnro}, mnro, nil},
		{"single beside multi", map[string]attachment.Publication{"b": mnmw, "a": mnmw}, snw, []string{"a", "b"}},
	} {
		st := attachment.State{Published: c.existing}
		got := exclusiveWith(st, map[bool]string{true: "a", false: "c"}[c.name == "same node again"], c.want)
		if !slices.Equal(got, c.conflict) {
			t.Errorf("%s: conflicts with %v, want %v", c.name, got, c.conflict)
		}
	}
}

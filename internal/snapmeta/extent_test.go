package snapmeta

import (
	"reflect"
	"strings"
	"testing"
)

func TestAssembler(t *testing.T) {
	const M = 4 << 20
	type in struct{ off, len int64 }
	tests := []struct {
		name    string
		style   Style
		start   int64
		max     int
		in      []in
		want    [][]Extent // messages
		wantErr string
	}{
		{name: "nothing still sends one message", max: 3, want: [][]Extent{{}}},
		{name: "coalesces adjacent and overlapping", max: 10,
			in:   []in{{0, 10}, {10, 5}, {12, 8}, {30, 1}, {31, 1}, {40, 2}},
			want: [][]Extent{{{0, 20}, {30, 2}, {40, 2}}}},
		{name: "max results per message", max: 2,
			in:   []in{{0, 1}, {2, 1}, {4, 1}, {6, 1}, {8, 1}},
			want: [][]Extent{{{0, 1}, {2, 1}}, {{4, 1}, {6, 1}}, {{8, 1}}}},
		{name: "full last message sends no empty one", max: 2,
			in:   []in{{0, 1}, {2, 1}},
			want: [][]Extent{{{0, 1}, {2, 1}}}},
		{name: "clips at the starting offset", start: 15, max: 10,
			in:   []in{{0, 10}, {10, 10}, {25, 5}},
			want: [][]Extent{{{15, 5}, {25, 5}}}},
		{name: "skips zero-length", max: 10, in: []in{{5, 0}, {7, 1}}, want: [][]Extent{{{7, 1}}}},
		{name: "fixed rounds out to blocks", style: Fixed, max: 10,
			in:   []in{{1, 1}, {M - 1, 2}, {3*M + 5, 1}},
			want: [][]Extent{{{0, M}, {M, M}, {3 * M, M}}}},
		{name: "fixed sends the block containing the start whole", style: Fixed, start: M + 7, max: 10,
			in:   []in{{M + 7, 10}, {2 * M, 1}},
			want: [][]Extent{{{M, M}, {2 * M, M}}}},
		{name: "fixed splits runs over messages", style: Fixed, max: 2,
			in:   []in{{0, 3 * M}},
			want: [][]Extent{{{0, M}, {M, M}}, {{2 * M, M}}}},
		{name: "fixed merges extents of one block", style: Fixed, max: 10,
			in:   []in{{0, 1}, {100, 1}, {M - 1, 1}},
			want: [][]Extent{{{0, M}}}},
		{name: "out of order is an error", max: 10, in: []in{{100, 10}, {50, 10}}, wantErr: "out of order"},
		{name: "overlap with sent extents is an error", max: 1, in: []in{{100, 10}, {120, 10}, {105, 10}}, wantErr: "out of order"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got [][]Extent
			a := newAssembler(tt.style, M, tt.start, tt.max, func(b []Extent) error {
				if len(b) > tt.max {
					t.Errorf("message of %d extents, max %d", len(b), tt.max)
				}
				got = append(got, append([]Extent{}, b...))
				return nil
			})
			var err error
			for _, e := range tt.in {
				if err = a.add(e.off, e.len); err != nil {
					break
				}
			}
			if err == nil {
				err = a.finish()
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("messages = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestParseStyle(t *testing.T) {
	for in, want := range map[string]Style{"": Variable, "variable": Variable, "fixed": Fixed} {
		if got, err := ParseStyle(in); err != nil || got != want {
			t.Errorf("ParseStyle(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseStyle("FIXED_LENGTH"); err == nil {
		t.Error("ParseStyle accepted FIXED_LENGTH")
	}
}

package cephfs

import (
	"strings"
	"testing"

	"github.com/monoceph/monoceph/internal/journal"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestParsePins(t *testing.T) {
	tests := []struct {
		name    string
		in      map[string]string
		want    pins
		errName string
	}{
		{"none: unpinned", nil, pins{export: -1}, ""},
		{"export", map[string]string{"pinExport": "2"}, pins{export: 2}, ""},
		{"distributed", map[string]string{"pinDistributed": "true"}, pins{export: -1, distributed: true}, ""},
		{"random", map[string]string{"pinRandom": "0.005"}, pins{export: -1, random: 0.005}, ""},
		{"unknown", map[string]string{"XXX_FakeKey": "x"}, pins{}, "XXX_FakeKey"},
		{"rank below -1", map[string]string{"pinExport": "-2"}, pins{}, "pinExport"},
		{"rank not a number", map[string]string{"pinExport": "zero"}, pins{}, "pinExport"},
		{"distributed not a bool", map[string]string{"pinDistributed": "sometimes"}, pins{}, "pinDistributed"},
		{"random above 1", map[string]string{"pinRandom": "1.5"}, pins{}, "pinRandom"},
		{"random negative", map[string]string{"pinRandom": "-0.1"}, pins{}, "pinRandom"},
		{"random NaN", map[string]string{"pinRandom": "NaN"}, pins{}, "pinRandom"}, // compares false with both bounds
		{"random infinite", map[string]string{"pinRandom": "+Inf"}, pins{}, "pinRandom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parsePins(tt.in)
			if tt.errName != "" {
				if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `mutable_parameters["`+tt.errName+`"]`) {
					t.Fatalf("err = %v, want INVALID_ARGUMENT naming %s", err, tt.errName)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestPinsApplied(t *testing.T) {
	fresh := &journal.Record{Attrs: map[string]string{}}
	if !pinsApplied(fresh, defaultPins) {
		t.Error("a volume never pinned has the default pins: nothing to do")
	}
	if pinsApplied(fresh, pins{export: 0}) {
		t.Error("an export pin on a fresh volume must be applied")
	}
	pinned := &journal.Record{Attrs: map[string]string{attrPins: pins{export: 1}.String()}}
	if !pinsApplied(pinned, pins{export: 1}) || pinsApplied(pinned, defaultPins) {
		t.Error("recorded pins not compared")
	}
}

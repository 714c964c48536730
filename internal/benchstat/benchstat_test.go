package benchstat

import (
	"errors"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	s := Samples{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	for _, tt := range []struct {
		p    float64
		want time.Duration
	}{{50, 5}, {90, 9}, {99, 10}, {0, 1}, {100, 10}} {
		if got := s.Percentile(tt.p); got != tt.want {
			t.Errorf("p%v = %v, want %v", tt.p, got, tt.want)
		}
	}
	if (Samples{}).Percentile(50) != 0 {
		t.Error("empty")
	}
}

func TestRun(t *testing.T) {
	seen := make([]bool, 100)
	s, _, err := Run(100, 7, func(i int) error {
		seen[i] = true
		if i == 42 {
			return errors.New("boom")
		}
		return nil
	})
	if len(s) != 100 || err == nil || err.Error() != "boom" {
		t.Fatalf("Run = %d samples, %v", len(s), err)
	}
	for i, ok := range seen {
		if !ok {
			t.Fatalf("op %d never ran", i)
		}
	}
}

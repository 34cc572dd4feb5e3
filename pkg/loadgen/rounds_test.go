package loadgen

import (
	"slices"
	"testing"
	"time"
)

func TestABBAAlternatesAndMerges(t *testing.T) {
	for _, tc := range []struct {
		round int
		sides int
		want  string
	}{{0, 2, "abba"}, {1, 2, "baab"}, {0, 3, "abccba"}, {3, 3, "cbaabc"}} {
		var got []byte
		sides := make([]func() Result, tc.sides)
		for i := range sides {
			sides[i] = func() Result {
				got = append(got, byte('a'+i))
				return Result{Requests: i + 1, Duration: time.Second, Latencies: []time.Duration{time.Duration(i)}}
			}
		}
		out := ABBA(tc.round, sides...)
		if string(got) != tc.want {
			t.Errorf("round %d of %d sides ran %s, want %s", tc.round, tc.sides, got, tc.want)
		}
		for i, r := range out {
			if r.Requests != 2*(i+1) || r.Duration != 2*time.Second || !slices.Equal(r.Latencies, []time.Duration{time.Duration(i), time.Duration(i)}) {
				t.Errorf("side %d: %+v, want both runs merged", i, r)
			}
		}
	}
}

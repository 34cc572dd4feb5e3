package controller

import (
	"testing"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
)

// TestEffectiveSplitFollowsReadyTargets: the desired split applies once its
// shared versions are ready (or nothing of the previous one is ready); tags
// apply at once.
func TestEffectiveSplitFollowsReadyTargets(t *testing.T) {
	prev := []slessv1.ServingVersion{{Number: 1, Percent: 100, Ready: true}}
	desired := split{2: {Number: 2, Percent: 90}, 1: {Number: 1, Percent: 10, Tags: []string{"old"}}}
	for _, tc := range []struct {
		name  string
		ready map[int32]bool
		prev  []slessv1.ServingVersion
		want  map[int32]int32
		flip  bool
	}{
		{"target not ready: the previous split stays", map[int32]bool{1: true}, prev, map[int32]int32{1: 100}, false},
		{"every target ready: flip", map[int32]bool{1: true, 2: true}, prev, map[int32]int32{1: 10, 2: 90}, true},
		{"nothing ready on either side: the desired split", map[int32]bool{}, prev, map[int32]int32{1: 10, 2: 90}, true},
		{"no previous split", map[int32]bool{}, nil, map[int32]int32{1: 10, 2: 90}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, flipped := effectiveSplit(tc.prev, desired, func(n int32) bool { return tc.ready[n] })
			if flipped != tc.flip {
				t.Errorf("flipped %v, want %v", flipped, tc.flip)
			}
			for n, e := range got {
				if e.Percent != tc.want[n] {
					t.Errorf("version %d at %d %%, want %d", n, e.Percent, tc.want[n])
				}
			}
			if e := got[1]; e == nil || len(e.Tags) != 1 || e.Tags[0] != "old" {
				t.Errorf("the tag does not route at once: %+v", got[1])
			}
		})
	}
}

package queuedepth

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
)

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		name    string
		depth   int
		serving []slessv1.ServingVersion
		want    map[int32]int
	}{
		{"one version takes it all", 40, []slessv1.ServingVersion{{Number: 3, Percent: 100}}, map[int32]int{3: 40}},
		{"an empty queue is listed as 0", 0, []slessv1.ServingVersion{{Number: 3, Percent: 100}}, map[int32]int{3: 0}},
		{"by percent, rounded up", 5, []slessv1.ServingVersion{{Number: 1, Percent: 90}, {Number: 2, Percent: 10}}, map[int32]int{1: 5, 2: 1}},
		{"a draining or tagged-only version gets none", 10, []slessv1.ServingVersion{{Number: 1, Percent: 0, Draining: true},
			{Number: 2, Percent: 0, Tags: []string{"beta"}}, {Number: 3, Percent: 100}}, map[int32]int{3: 10}},
		{"nothing serves", 10, nil, map[int32]int{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Split(tc.depth, tc.serving)); diff != "" {
				t.Errorf("Split(%d) (-want +got):\n%s", tc.depth, diff)
			}
		})
	}
}

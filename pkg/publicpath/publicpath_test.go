package publicpath

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
)

var t0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

// trig is an HTTP trigger on path created at t0 plus second seconds,
// judged Active for its current generation unless a change says otherwise.
func trig(name, path string, second int, change ...func(*slessv1.Trigger)) slessv1.Trigger {
	t := slessv1.Trigger{
		ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1, CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(second) * time.Second))},
		Spec:       slessv1.TriggerSpec{Type: slessv1.TriggerHTTP, HTTP: &slessv1.HTTPTrigger{Path: path}},
		Status:     slessv1.TriggerStatus{Phase: slessv1.TriggerActive, ObservedGeneration: 1},
	}
	for _, c := range change {
		c(&t)
	}
	return t
}

func phase(p slessv1.TriggerPhase) func(*slessv1.Trigger) {
	return func(t *slessv1.Trigger) { t.Status.Phase = p }
}

func disabled(t *slessv1.Trigger) { t.Spec.Enabled = ptr.To(false) }

func deleting(t *slessv1.Trigger) { t.DeletionTimestamp = ptr.To(metav1.NewTime(t0.Add(time.Hour))) }

func staleStatus(t *slessv1.Trigger) { t.Generation = 2 }

func cron(t *slessv1.Trigger) {
	t.Spec.Type, t.Spec.HTTP = slessv1.TriggerCron, nil
	t.Spec.Cron = &slessv1.CronTrigger{Schedule: "@daily"}
}

func name(t *slessv1.Trigger) string {
	if t == nil {
		return ""
	}
	return t.Name
}

func TestHolder(t *testing.T) {
	for _, tt := range []struct {
		name     string
		triggers []slessv1.Trigger
		path     string
		want     string
	}{
		{"none asks for it", []slessv1.Trigger{trig("a", "/other", 0)}, "/clash", ""},
		{"the only one", []slessv1.Trigger{trig("a", "/clash", 0)}, "/clash", "a"},
		{"the older one", []slessv1.Trigger{trig("young", "/clash", 5), trig("old", "/clash", 1)}, "/clash", "old"},
		{"same second: the name that sorts first", []slessv1.Trigger{trig("b", "/clash", 0), trig("a", "/clash", 0)}, "/clash", "a"},
		{"same second, the other order", []slessv1.Trigger{trig("a", "/clash", 0), trig("b", "/clash", 0)}, "/clash", "a"},
		{"age before name", []slessv1.Trigger{trig("a", "/clash", 1), trig("z", "/clash", 0)}, "/clash", "z"},
		{"a disabled trigger keeps its path", []slessv1.Trigger{trig("new", "/clash", 3), trig("off", "/clash", 0, disabled)}, "/clash", "off"},
		{"whatever its status says", []slessv1.Trigger{trig("new", "/clash", 3), trig("old", "/clash", 0, phase(slessv1.TriggerWaiting))}, "/clash", "old"},
		{"a trigger being deleted gives it up", []slessv1.Trigger{trig("new", "/clash", 3), trig("going", "/clash", 0, deleting)}, "/clash", "new"},
		{"a parent path is another path", []slessv1.Trigger{trig("parent", "/", 0), trig("child", "/clash", 1)}, "/clash", "child"},
		{"a trailing slash is another path", []slessv1.Trigger{trig("slash", "/clash/", 0), trig("bare", "/clash", 1)}, "/clash", "bare"},
		{"not an http trigger", []slessv1.Trigger{trig("tick", "/clash", 0, cron), trig("web", "/clash", 1)}, "/clash", "web"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := name(Holder(tt.triggers, tt.path)); got != tt.want {
				t.Errorf("Holder(%s) = %q, want %q", tt.path, got, tt.want)
			}
		})
	}
}

// TestPrecedesIsATotalOrder: of any two distinct triggers exactly one
// precedes the other, whatever their timestamps.
func TestPrecedesIsATotalOrder(t *testing.T) {
	ts := []slessv1.Trigger{trig("a", "/", 0), trig("b", "/", 0), trig("c", "/", 1), trig("d", "/", -1)}
	for i := range ts {
		if Precedes(&ts[i], &ts[i]) {
			t.Errorf("%s precedes itself", ts[i].Name)
		}
		for j := range ts {
			if i != j && Precedes(&ts[i], &ts[j]) == Precedes(&ts[j], &ts[i]) {
				t.Errorf("Precedes(%s, %s) = Precedes(%s, %s)", ts[i].Name, ts[j].Name, ts[j].Name, ts[i].Name)
			}
		}
	}
}

func TestRoute(t *testing.T) {
	for _, tt := range []struct {
		name     string
		triggers []slessv1.Trigger
		sub      string
		want     string
	}{
		{"no trigger", nil, "/x", ""},
		{"the path itself", []slessv1.Trigger{trig("a", "/app", 0)}, "/app", "a"},
		{"below the path", []slessv1.Trigger{trig("a", "/app", 0)}, "/app/notes/1", "a"},
		{"a path with a trailing slash serves below it", []slessv1.Trigger{trig("a", "/app/", 0)}, "/app/x", "a"},
		{"a longer name is not below", []slessv1.Trigger{trig("a", "/app", 0)}, "/apple", ""},
		{"the root serves everything", []slessv1.Trigger{trig("root", "/", 0)}, "/any/thing", "root"},
		{"the longest path wins", []slessv1.Trigger{trig("root", "/", 0), trig("api", "/api", 1), trig("v1", "/api/v1", 2)}, "/api/v1/x", "v1"},
		{"the longest path wins, in any order", []slessv1.Trigger{trig("v1", "/api/v1", 2), trig("api", "/api", 1)}, "/api/v1/x", "v1"},
		{"only the Active one", []slessv1.Trigger{trig("young", "/clash", 0, phase(slessv1.TriggerFailed)), trig("old", "/clash", 0)}, "/clash", "old"},
		{"Failed alone serves nothing", []slessv1.Trigger{trig("a", "/clash", 0, phase(slessv1.TriggerFailed))}, "/clash", ""},
		{"Waiting serves nothing", []slessv1.Trigger{trig("a", "/clash", 0, phase(slessv1.TriggerWaiting))}, "/clash", ""},
		{"not yet judged serves nothing", []slessv1.Trigger{trig("a", "/clash", 0, phase(""))}, "/clash", ""},
		{"a status of an earlier spec serves nothing", []slessv1.Trigger{trig("a", "/clash", 0, staleStatus)}, "/clash", ""},
		{"disabled serves nothing", []slessv1.Trigger{trig("a", "/clash", 0, disabled)}, "/clash", ""},
		{"being deleted serves nothing", []slessv1.Trigger{trig("a", "/clash", 0, deleting)}, "/clash", ""},
		{"a cron trigger serves nothing", []slessv1.Trigger{trig("a", "/clash", 0, cron)}, "/clash", ""},
		// Both still Active in the moment before the operator judged the
		// second: the one the operator keeps, in either order.
		{"two Active on one path: the older", []slessv1.Trigger{trig("young", "/clash", 1), trig("old", "/clash", 0)}, "/clash", "old"},
		{"two Active in one second: by name", []slessv1.Trigger{trig("b", "/clash", 0), trig("a", "/clash", 0)}, "/clash", "a"},
		{"two Active in one second, the other order", []slessv1.Trigger{trig("a", "/clash", 0), trig("b", "/clash", 0)}, "/clash", "a"},
		{"an inactive longer path leaves the shorter", []slessv1.Trigger{trig("api", "/api", 0), trig("v1", "/api/v1", 0, phase(slessv1.TriggerFailed))}, "/api/v1/x", "api"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := name(Route(tt.triggers, tt.sub)); got != tt.want {
				t.Errorf("Route(%s) = %q, want %q", tt.sub, got, tt.want)
			}
		})
	}
}

func TestRest(t *testing.T) {
	for _, tt := range []struct{ path, sub, want string }{
		{"/app", "/app", "/"},
		{"/app", "/app/notes", "/notes"},
		{"/app/", "/app/notes", "/notes"},
		{"/", "/x/y", "/x/y"},
		{"/", "/", "/"},
	} {
		if got := Rest(tt.path, tt.sub); got != tt.want {
			t.Errorf("Rest(%s, %s) = %q, want %q", tt.path, tt.sub, got, tt.want)
		}
	}
}

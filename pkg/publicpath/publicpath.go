// Package publicpath owns which HTTP trigger serves a path of a tenant's
// public address space, /fn/<tenant><path>. Two triggers may ask for one
// path: the operator makes exactly one of them Active (Holder), and the
// gateway sends a request only to a trigger the operator made Active
// (Route). Both use the one order defined here (Precedes), so that in the
// moment before the operator has judged a new trigger, the gateway already
// prefers the one the operator will keep.
package publicpath

import (
	"strings"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
)

// Precedes reports whether a holds a path before b when both ask for it:
// the one created first; of two created in the same second (creation
// timestamps have one-second resolution), the one whose name sorts first.
// Names are unique in a namespace, so of two triggers of one tenant
// exactly one precedes the other.
func Precedes(a, b *slessv1.Trigger) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

// PathOf is the path t asks for, and false when t is not an HTTP trigger.
func PathOf(t *slessv1.Trigger) (string, bool) {
	if t.Spec.Type != slessv1.TriggerHTTP || t.Spec.HTTP == nil {
		return "", false
	}
	return t.Spec.HTTP.Path, true
}

// Holder returns the trigger of triggers (one tenant's) that holds path:
// of the HTTP triggers that ask for exactly that path and are not being
// deleted, the first by Precedes, enabled or not (disabling a trigger does
// not hand its path to another). nil when none asks for it.
func Holder(triggers []slessv1.Trigger, path string) *slessv1.Trigger {
	var h *slessv1.Trigger
	for i := range triggers {
		t := &triggers[i]
		if p, ok := PathOf(t); !ok || p != path || t.DeletionTimestamp != nil {
			continue
		}
		if h == nil || Precedes(t, h) {
			h = t
		}
	}
	return h
}

// Route returns the trigger of triggers (one tenant's) that serves a
// request for sub: of the enabled HTTP triggers that the operator judged
// Active for their current spec, the one with the longest path that is sub
// or a parent of it; of two on the same path, the one Holder keeps. nil
// when none serves sub.
func Route(triggers []slessv1.Trigger, sub string) *slessv1.Trigger {
	var best *slessv1.Trigger
	for i := range triggers {
		t := &triggers[i]
		p, ok := PathOf(t)
		if !ok || !active(t) || !serves(p, sub) {
			continue
		}
		if best == nil || len(p) > len(best.Spec.HTTP.Path) || (p == best.Spec.HTTP.Path && Precedes(t, best)) {
			best = t
		}
	}
	return best
}

// Rest is what the function sees of sub when its trigger's path is path:
// the trigger's path is where the function is mounted.
func Rest(path, sub string) string {
	rest := strings.TrimPrefix(sub, strings.TrimSuffix(path, "/"))
	if !strings.HasPrefix(rest, "/") {
		rest = "/" + rest
	}
	return rest
}

// active reports whether the operator made t Active for its current spec:
// a status written for an earlier generation (another path, or before it
// was disabled) is not trusted.
func active(t *slessv1.Trigger) bool {
	return t.IsEnabled() && t.DeletionTimestamp == nil && t.Status.Phase == slessv1.TriggerActive &&
		t.Status.ObservedGeneration == t.Generation
}

// serves reports whether a trigger on path serves sub: sub is the path or
// below it.
func serves(path, sub string) bool {
	return sub == path || strings.HasPrefix(sub, strings.TrimSuffix(path, "/")+"/")
}

package controller

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
)

// logLine is one JSON line of the harness's log, as far as it matters here.
type logLine struct {
	Level          string `json:"level"`
	Msg            string `json:"msg"`
	Err            string `json:"err"`
	ControllerKind string `json:"controllerKind"`
}

// lines returns the harness's log lines that keep says to.
func (h *harness) lines(keep func(logLine) bool) []string {
	var out []string
	for _, l := range strings.Split(h.logs.String(), "\n") {
		var ll logLine
		if json.Unmarshal([]byte(l), &ll) == nil && keep(ll) {
			out = append(out, l)
		}
	}
	return out
}

// TestConflictsAreRequeuedNotLoggedAsErrors changes a Tenant's and a
// Trigger's spec over and over while their reconcilers write their status,
// so that the reconcilers' optimistic-lock writes meet conflicts: each is a
// quiet requeue (a debug line), never a "Reconciler error" at ERROR.
func TestConflictsAreRequeuedNotLoggedAsErrors(t *testing.T) {
	h := newHarness(t)
	tn, ns := h.tenant(t)
	tr := h.trigger(t, ns, "busy", slessv1.TriggerSpec{FunctionRef: slessv1.LocalRef{Name: "absent"}, Type: slessv1.TriggerCron,
		Cron: &slessv1.CronTrigger{Schedule: "*/5 * * * *"}})
	conflictErr := func(l logLine) bool { return strings.Contains(l.Err, "the object has been modified") }
	requeued := func(kind string) func(logLine) bool {
		return func(l logLine) bool {
			return l.ControllerKind == kind && strings.HasPrefix(l.Msg, "requeued:") && conflictErr(l)
		}
	}
	errorLines := func(l logLine) bool { return l.Level == "ERROR" && conflictErr(l) }

	// Every spec change is a new generation, which each reconciler writes
	// into status.observedGeneration: a status write racing the next change.
	var wg sync.WaitGroup
	done := make(chan struct{})
	for _, obj := range []struct {
		o     client.Object
		patch func(i int) string
	}{
		{tn, func(i int) string { return fmt.Sprintf(`{"spec":{"displayName":"n%d"}}`, i) }},
		{tr, func(i int) string { return fmt.Sprintf(`{"spec":{"cron":{"payload":{"n":%d}}}}`, i) }},
	} {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				if err := h.c.Patch(t.Context(), obj.o, client.RawPatch(types.MergePatchType, []byte(obj.patch(i)))); err != nil {
					t.Errorf("patch %s: %v", obj.o.GetName(), err)
					return
				}
			}
		})
	}
	h.eventuallyShow(t, "a conflict met by each reconciler", func() bool {
		return len(h.lines(errorLines)) > 0 || (len(h.lines(requeued("Tenant"))) > 0 && len(h.lines(requeued("Trigger"))) > 0)
	}, func() string {
		return fmt.Sprintf("%d conflicts requeued by the Tenant reconciler, %d by the Trigger reconciler",
			len(h.lines(requeued("Tenant"))), len(h.lines(requeued("Trigger"))))
	})
	close(done)
	wg.Wait()
	if errs := h.lines(errorLines); len(errs) > 0 {
		t.Errorf("%d conflicts logged at ERROR, want none; the first:\n%s", len(errs), errs[0])
	}
	t.Logf("conflicts requeued: Tenant %d, Trigger %d", len(h.lines(requeued("Tenant"))), len(h.lines(requeued("Trigger"))))
}

package controller

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
)

func (h *harness) trigger(t *testing.T, ns, name string, spec slessv1.TriggerSpec) *slessv1.Trigger {
	t.Helper()
	tr := &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}
	if err := h.c.Create(t.Context(), tr); err != nil {
		t.Fatal(err)
	}
	return tr
}

// TestTriggerTurnsActiveWhenItsFunctionIsReady creates the trigger before
// its function. Resync is ten hours and nothing requeues a waiting trigger,
// so the trigger can only turn Active through the Function watch.
func TestTriggerTurnsActiveWhenItsFunctionIsReady(t *testing.T) {
	h := newHarness(t)
	_, ns := h.tenant(t)
	cron := h.trigger(t, ns, "tick", slessv1.TriggerSpec{FunctionRef: slessv1.LocalRef{Name: "later"}, Type: slessv1.TriggerCron,
		Cron: &slessv1.CronTrigger{Schedule: "*/5 * * * *", TimeZone: "Europe/Moscow"}})
	web := h.trigger(t, ns, "web", slessv1.TriggerSpec{FunctionRef: slessv1.LocalRef{Name: "later"}, Type: slessv1.TriggerHTTP,
		HTTP: &slessv1.HTTPTrigger{Path: "/hello"}})
	h.eventually(t, "trigger Waiting for a missing function", func() bool {
		h.get(t, cron)
		return cron.Status.Phase == slessv1.TriggerWaiting && strings.Contains(cron.Status.Message, "does not exist")
	})

	fn := h.function(t, ns, "later", func(f *slessv1.Function) { f.Spec.Image = image })
	h.markAvailable(t, ns, "later")
	h.waitReady(t, fn)
	readyAt := time.Now()
	h.eventually(t, "trigger Active", func() bool { h.get(t, cron); return cron.Status.Phase == slessv1.TriggerActive })
	t.Logf("trigger turned Active %s after its function was seen Ready", time.Since(readyAt).Round(time.Millisecond))

	next := cron.Status.NextFireTime
	if next == nil || next.Minute()%5 != 0 || next.Second() != 0 || !next.After(time.Now().Add(-time.Second)) {
		t.Errorf("nextFireTime = %v, want the next five-minute boundary", next)
	}
	h.eventually(t, "http trigger Active with a URL", func() bool {
		h.get(t, web)
		return web.Status.Phase == slessv1.TriggerActive && web.Status.URL == publicURL+"/fn/"+strings.TrimPrefix(ns, "sless-fn-")+"/hello"
	})

	// Disabling keeps the trigger and stops it.
	cron.Spec.Enabled = ptr.To(false)
	if err := h.c.Update(t.Context(), cron); err != nil {
		t.Fatal(err)
	}
	h.eventually(t, "trigger Disabled", func() bool {
		h.get(t, cron)
		return cron.Status.Phase == slessv1.TriggerDisabled && cron.Status.NextFireTime == nil
	})
}

func TestTriggerValidation(t *testing.T) {
	h := newHarness(t)
	_, ns := h.tenant(t)
	h.function(t, ns, "f", func(f *slessv1.Function) { f.Spec.Image = image })
	tests := []struct {
		name, want string
		spec       slessv1.TriggerSpec
	}{
		{"bad-cron", "schedule", slessv1.TriggerSpec{FunctionRef: slessv1.LocalRef{Name: "f"}, Type: slessv1.TriggerCron, Cron: &slessv1.CronTrigger{Schedule: "every day"}}},
		{"bad-zone", "IANA", slessv1.TriggerSpec{FunctionRef: slessv1.LocalRef{Name: "f"}, Type: slessv1.TriggerCron, Cron: &slessv1.CronTrigger{Schedule: "@daily", TimeZone: "Moon/Base"}}},
	}
	first := h.trigger(t, ns, "first", slessv1.TriggerSpec{FunctionRef: slessv1.LocalRef{Name: "f"}, Type: slessv1.TriggerHTTP, HTTP: &slessv1.HTTPTrigger{Path: "/same"}})
	time.Sleep(1100 * time.Millisecond) // creation timestamps have second resolution
	tests = append(tests, struct {
		name, want string
		spec       slessv1.TriggerSpec
	}{"second", `already served by trigger "first"`, first.Spec})
	for _, tt := range tests {
		tr := h.trigger(t, ns, tt.name, tt.spec)
		h.eventually(t, tt.name+" Failed", func() bool {
			h.get(t, tr)
			return tr.Status.Phase == slessv1.TriggerFailed && strings.Contains(tr.Status.Message, tt.want)
		})
	}
}

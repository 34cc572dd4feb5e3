package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/testenv"
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
		return cron.Status.Phase == slessv1.TriggerDisabled
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
	// "second" may be created in the same second as "first": the name
	// breaks the tie.
	first := h.trigger(t, ns, "first", slessv1.TriggerSpec{FunctionRef: slessv1.LocalRef{Name: "f"}, Type: slessv1.TriggerHTTP, HTTP: &slessv1.HTTPTrigger{Path: "/same"}})
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

// TestOnePathHasOneActiveTrigger creates two http triggers on one path at
// once, in one second (creation timestamps have one-second resolution):
// exactly one turns Active, the one whose name sorts first, and the other
// Failed. Deleting the Active one hands the path to the other; resync is
// ten hours, so only the watch of Triggers can make that happen.
func TestOnePathHasOneActiveTrigger(t *testing.T) {
	h := newHarness(t)
	_, ns := h.tenant(t)
	for _, name := range []string{"fa", "fb"} {
		fn := h.function(t, ns, name, func(f *slessv1.Function) { f.Spec.Image = image })
		h.markAvailable(t, ns, name)
		h.waitReady(t, fn)
	}
	on := func(name, fn string) *slessv1.Trigger {
		return &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: slessv1.TriggerSpec{
			FunctionRef: slessv1.LocalRef{Name: fn}, Type: slessv1.TriggerHTTP, HTTP: &slessv1.HTTPTrigger{Path: "/clash"}}}
	}
	var a, b *slessv1.Trigger
	for attempt := 0; ; attempt++ {
		a, b = on(fmt.Sprintf("clash-a%d", attempt), "fa"), on(fmt.Sprintf("clash-b%d", attempt), "fb")
		var wg sync.WaitGroup
		var errA, errB error
		wg.Go(func() { errA = h.c.Create(t.Context(), a) })
		wg.Go(func() { errB = h.c.Create(t.Context(), b) })
		wg.Wait()
		if err := errors.Join(errA, errB); err != nil {
			t.Fatal(err)
		}
		if a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			break
		}
		// The pair fell on both sides of a second; another pair.
		if attempt == 4 {
			t.Fatalf("five pairs created at once never fell into one second; the last: %s and %s", a.CreationTimestamp, b.CreationTimestamp)
		}
		for _, o := range []*slessv1.Trigger{a, b} {
			if err := h.c.Delete(t.Context(), o); err != nil {
				t.Fatal(err)
			}
		}
	}
	h.eventually(t, a.Name+" Active and "+b.Name+" Failed", func() bool {
		h.get(t, a)
		h.get(t, b)
		return a.Status.Phase == slessv1.TriggerActive && b.Status.Phase == slessv1.TriggerFailed &&
			strings.Contains(b.Status.Message, fmt.Sprintf("already served by trigger %q", a.Name))
	})

	if err := h.c.Delete(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	h.eventually(t, b.Name+" Active once "+a.Name+" is deleted", func() bool {
		h.get(t, b)
		return b.Status.Phase == slessv1.TriggerActive && b.Status.URL == publicURL+"/fn/"+strings.TrimPrefix(ns, "sless-fn-")+"/clash"
	})
}

// listFails is a client whose List fails, as a cache that cannot answer.
type listFails struct{ client.Client }

func (listFails) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("the cache cannot list")
}

// TestTriggerValidationRetriesWhenTheListFails: whether an http trigger
// holds its path cannot be decided without the list of the tenant's
// triggers; a failed List is an error to retry, never a valid spec.
func TestTriggerValidationRetriesWhenTheListFails(t *testing.T) {
	c, err := client.New(kube.Config, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ns := testenv.TenantNamespace(t.Context(), t, c, testenv.Name("t"))
	tr := &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}, Spec: slessv1.TriggerSpec{
		FunctionRef: slessv1.LocalRef{Name: "f"}, Type: slessv1.TriggerHTTP, HTTP: &slessv1.HTTPTrigger{Path: "/web"}}}
	if err := c.Create(t.Context(), tr); err != nil {
		t.Fatal(err)
	}
	r := &TriggerReconciler{Client: listFails{c}, APIReader: c, PublicURL: publicURL}
	_, err = r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(tr)})
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(tr), tr); err != nil {
		t.Fatal(err)
	}
	if err == nil || !strings.Contains(err.Error(), "the cache cannot list") || tr.Status.Phase != "" {
		t.Fatalf("Reconcile with a failed List returned %v and judged the trigger %q (%q); want the List's error and no judgement",
			err, tr.Status.Phase, tr.Status.Message)
	}
}

// TestTheSchedulersFireTimesAreNotTheOperators: status.nextFireTime and
// status.lastFireTime have one writer, the scheduler, which applies them as
// field manager sless-scheduler (services/scheduler/internal/schedule). The
// operator's status writes (a new generation, the trigger disabled) leave
// them as the scheduler applied them; before, the operator wrote its own
// guess of nextFireTime over the scheduler's.
func TestTheSchedulersFireTimesAreNotTheOperators(t *testing.T) {
	h := newHarness(t)
	_, ns := h.tenant(t)
	fn := h.function(t, ns, "f", func(f *slessv1.Function) { f.Spec.Image = image })
	h.markAvailable(t, ns, "f")
	h.waitReady(t, fn)
	tr := h.trigger(t, ns, "tick", slessv1.TriggerSpec{FunctionRef: slessv1.LocalRef{Name: "f"}, Type: slessv1.TriggerCron,
		Cron: &slessv1.CronTrigger{Schedule: "*/5 * * * *"}})
	h.eventually(t, "trigger Active", func() bool { h.get(t, tr); return tr.Status.Phase == slessv1.TriggerActive })

	// The scheduler's fire times: a fire it has deferred (due an hour ago)
	// and the one before it.
	next := time.Now().Add(-time.Hour).UTC().Truncate(time.Minute)
	last := next.Add(-5 * time.Minute)
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": slessv1.GroupVersion.String(), "kind": "Trigger",
		"metadata": map[string]any{"name": tr.Name, "namespace": ns},
		"status":   map[string]any{"nextFireTime": next.Format(time.RFC3339), "lastFireTime": last.Format(time.RFC3339)},
	}}
	if err := h.c.Status().Apply(t.Context(), client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("sless-scheduler"), client.ForceOwnership); err != nil {
		t.Fatal(err)
	}
	fireTimes := func() string {
		return fmt.Sprintf("nextFireTime %v, lastFireTime %v (applied: %s, %s)", tr.Status.NextFireTime, tr.Status.LastFireTime,
			next.Format(time.RFC3339), last.Format(time.RFC3339))
	}
	kept := func() bool {
		st := tr.Status
		return st.NextFireTime != nil && st.NextFireTime.Time.Equal(next) && st.LastFireTime != nil && st.LastFireTime.Time.Equal(last)
	}
	for _, step := range []struct {
		what   string
		change func(*slessv1.Trigger)
		phase  slessv1.TriggerPhase
	}{
		{"a new generation", func(tr *slessv1.Trigger) { tr.Spec.Cron.Payload = &apiextensionsv1.JSON{Raw: []byte(`{"n":1}`)} }, slessv1.TriggerActive},
		{"disabled", func(tr *slessv1.Trigger) { tr.Spec.Enabled = ptr.To(false) }, slessv1.TriggerDisabled},
	} {
		h.get(t, tr)
		base := tr.DeepCopy()
		step.change(tr)
		if err := h.c.Patch(t.Context(), tr, client.MergeFrom(base)); err != nil {
			t.Fatal(err)
		}
		gen := tr.Generation
		h.eventuallyShow(t, "the operator's status of generation "+fmt.Sprint(gen), func() bool {
			h.get(t, tr)
			return tr.Status.ObservedGeneration == gen && tr.Status.Phase == step.phase
		}, fireTimes)
		if !kept() {
			t.Errorf("after %s the operator changed the scheduler's fire times: %s", step.what, fireTimes())
		}
	}
}

package api

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
)

// TestTriggerCronFieldsRoundTrip: every cron field a developer sets through
// the API reaches the Trigger's spec and comes back as it was set.
func TestTriggerCronFieldsRoundTrip(t *testing.T) {
	deadline := int64(30)
	for _, in := range []TriggerSpec{
		{Function: "hello", Type: "cron", Cron: &CronTrigger{Schedule: "*/5 * * * *", TimeZone: "Europe/Berlin", ConcurrencyPolicy: "Forbid",
			StartingDeadlineSeconds: &deadline, Payload: json.RawMessage(`{"a":1}`), PreWarmSeconds: "auto"}},
		{Function: "hello", Type: "cron", Cron: &CronTrigger{Schedule: "@hourly", PreWarmSeconds: "45"}},
		{Function: "hello", Type: "cron", Cron: &CronTrigger{Schedule: "@hourly"}},
	} {
		tr := &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: "tick"}, Spec: triggerSpecCR(&in)}
		if got, want := tr.Spec.Cron.PreWarmSeconds, in.Cron.PreWarmSeconds; got != want {
			t.Errorf("spec.cron.preWarmSeconds %q, want %q", got, want)
		}
		if diff := cmp.Diff(in, triggerREST(tr).TriggerSpec); diff != "" {
			t.Errorf("round trip of %s (-want +got):\n%s", in.Cron.Schedule, diff)
		}
	}
}

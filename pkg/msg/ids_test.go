package msg

import (
	"testing"
	"time"

	"github.com/google/uuid"
)

// TestInvocationIDs: the derived ids keep their stored forms (a change
// would run a redelivered queue message, a cron fire across replicas or a
// job run twice), and differ where their inputs do.
func TestInvocationIDs(t *testing.T) {
	at := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct{ got, want string }{
		{CronInvocationID("uid-1", at), "cron-73a9f8edbeac2abe21e85007"},
		{CronInvocationID("uid-1", at.In(time.FixedZone("x", 3600))), "cron-73a9f8edbeac2abe21e85007"},
		{JobInvocationID("uid-2", 7), "job-6d8dd61bb4e07764c563"},
		{QueueInvocationID("sless-fn-t", "orders", "m-1"), "q-e5b931329cf25051f7d0ae85"},
	} {
		if c.got != c.want {
			t.Errorf("got %s, want %s", c.got, c.want)
		}
	}
	if CronInvocationID("uid-1", at) == CronInvocationID("uid-1", at.Add(time.Second)) ||
		JobInvocationID("uid-2", 7) == JobInvocationID("uid-2", 8) ||
		QueueInvocationID("sless-fn-t", "orders", "m-1") == QueueInvocationID("sless-fn-t", "orders2", "m-1") {
		t.Error("different inputs, one id")
	}
	a, b := QueueInvocationID("sless-fn-t", "orders", ""), QueueInvocationID("sless-fn-t", "orders", "")
	if a == b || uuid.Validate(a) != nil || uuid.Validate(NewInvocationID()) != nil {
		t.Errorf("a message without an id: %s, %s", a, b)
	}
}

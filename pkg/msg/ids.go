package msg

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/google/uuid"
)

// The invocation ids, derived here only. A derived id is the same for
// every replica and every redelivery, which is what makes the record and
// the history idempotent; the forms are stored (invocations.id, cron
// fires, job status), so they do not change.

// NewInvocationID is the id of an invocation nothing else names: a call
// through the gateway (sync or async), a dead letter's replay, a queue
// message without a message id.
func NewInvocationID() string { return uuid.NewString() }

// CronInvocationID is the id of a cron trigger's fire at its scheduled
// time: the same for every scheduler replica.
func CronInvocationID(triggerUID string, at time.Time) string {
	sum := sha256.Sum256([]byte(triggerUID + "|" + at.UTC().Format(time.RFC3339Nano)))
	return "cron-" + hex.EncodeToString(sum[:12])
}

// JobInvocationID is the id of one run of a FunctionJob.
func JobInvocationID(jobUID string, runID int64) string {
	sum := sha256.Sum256([]byte(jobUID + "\x00" + strconv.FormatInt(runID, 10)))
	return "job-" + hex.EncodeToString(sum[:10])
}

// QueueInvocationID is the id of a message a queue trigger consumed: from
// its message id, so that a redelivery is the same invocation, or new when
// the publisher gave none.
func QueueInvocationID(namespace, trigger, messageID string) string {
	if messageID == "" {
		return NewInvocationID()
	}
	sum := sha256.Sum256([]byte(namespace + "/" + trigger + "/" + messageID))
	return "q-" + hex.EncodeToString(sum[:12])
}

package invoke

import (
	"context"
	"fmt"

	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/rabbit"
)

// MaxRetries is the most retries an invocation gets, whatever its message
// asks (the API and the CRDs allow at most 20).
const MaxRetries = 20

// Verdict is what becomes of one attempt of an invocation.
type Verdict int

const (
	// Done: the attempt is the outcome (a success, or a failure no retry
	// can fix); it is recorded.
	Done Verdict = iota
	// Retry: the failure is worth another attempt and retries are left;
	// the message waits its backoff step and comes back.
	Retry
	// Exhausted: the failure was worth a retry but none is left; it is
	// recorded and dead-lettered.
	Exhausted
)

func (v Verdict) String() string {
	switch v {
	case Done:
		return "done"
	case Retry:
		return "retry"
	default:
		return "exhausted"
	}
}

// Decide is the invoker's one retry decision, for every trigger kind:
// attempt (1-based) failed in a way worth a retry (retryable) or not; the
// invocation allows maxRetries retries (at most MaxRetries).
func Decide(retryable bool, attempt int, maxRetries int32) Verdict {
	switch {
	case !retryable:
		return Done
	case attempt <= min(int(maxRetries), MaxRetries):
		return Retry
	default:
		return Exhausted
	}
}

// Conclude carries out the verdict on an attempt and returns what the
// consumer is to do with the message: nil acks it once the record is
// confirmed; rabbit.Retry sends it to the delay queue of its attempt;
// rabbit.Permanent drops it once its dead letter and record are confirmed.
// Any other error means the platform could not finish the attempt (the
// record or the dead letter was not confirmed) and the message comes back
// by the queue's policy.
func (e *Executor) Conclude(ctx context.Context, req *msg.InvocationRequested, rec *msg.InvocationCompleted, attempt int, retryable bool) error {
	verdict := Decide(retryable, attempt, req.MaxRetries)
	if verdict == Retry {
		e.Metrics.retries.Inc()
		return rabbit.Retry(fmt.Errorf("%w: %s", errRetry, rec.Error))
	}
	if verdict == Exhausted {
		if err := e.DeadLetter(ctx, req, rabbit.ReasonExhausted, rec.Error, rec.Attempts); err != nil {
			return err // the message comes back, and dies again
		}
	}
	if err := e.Records.Publish(ctx, rec); err != nil {
		return err // not recorded: the message comes back
	}
	if req.CallbackURL != "" {
		if err := e.Publisher.PublishMessage(ctx, &msg.CallbackRequested{URL: req.CallbackURL, Record: *rec}); err != nil {
			e.Log.Warn("callback not queued", "invocationID", req.InvocationID, "err", err)
		}
	}
	if verdict == Exhausted {
		e.Metrics.deadLetters.Inc()
		return rabbit.Permanent(fmt.Errorf("failed after %d attempts: %s", attempt, rec.Error))
	}
	return nil
}

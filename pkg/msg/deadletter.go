package msg

import "time"

// TypeInvocationDeadLettered names the record of an invocation that was
// dead-lettered.
const TypeInvocationDeadLettered = "invocation.deadlettered.v1"

// InvocationDeadLettered records an invocation given up on (its retries
// exhausted), with the request that would run it again: the invoker
// publishes it before it moves the message to a dead-letter queue, and
// stores it for the dead-letter API, which can replay the request as a
// new invocation.
type InvocationDeadLettered struct {
	InvocationID string      `json:"invocation_id"`
	Tenant       string      `json:"tenant"`
	Function     string      `json:"function"`
	Trigger      TriggerKind `json:"trigger"`
	TriggerName  string      `json:"trigger_name,omitempty"`
	// Reason is why it died (retries-exhausted, poison), Error the last
	// attempt's error.
	Reason         string              `json:"reason"`
	Error          string              `json:"error,omitempty"`
	Attempts       int32               `json:"attempts"`
	Request        InvocationRequested `json:"request"`
	DeadLetteredAt time.Time           `json:"dead_lettered_at"`
}

// Type implements Message.
func (*InvocationDeadLettered) Type() string { return TypeInvocationDeadLettered }

// Package msg owns the wire contract between sless services over RabbitMQ:
// the versioned message types, the exchange and queue names, and how a
// message maps to its routing key. It depends on the standard library only.
//
// Within a version only optional fields are added; a breaking change is a new
// type name (build.requested.v2). The golden files in testdata pin the format.
package msg

import (
	"encoding/json"
	"fmt"
)

// Message is a value that travels on the bus. Type is carried in the AMQP
// type property and is the routing key prefix.
type Message interface {
	Type() string
}

// Exchange is the topic exchange every platform message is published to.
const Exchange = "sless"

// Queues consumed by the services. Each is bound to Exchange with the keys
// listed in Bindings.
const (
	QueueBuildRequested     = "sless.builder.build-requested"
	QueueBuildCompleted     = "sless.operator.build-completed"
	QueueInvocationRequest  = "sless.invoker.invocation-requested"
	QueueInvocationHistory  = "sless.invoker.invocation-history"
	QueueJobCompleted       = "sless.operator.job-completed"
	QueueSchedulerCompleted = "sless.scheduler.invocation-completed"
	QueueCallbacks          = "sless.invoker.callbacks"
	QueueDeadLetters        = "sless.invoker.dead-letters"
)

// Bindings maps each platform queue to the routing keys it receives.
var Bindings = map[string][]string{
	QueueBuildRequested:     {TypeBuildRequested},
	QueueBuildCompleted:     {TypeBuildCompleted},
	QueueInvocationRequest:  {TypeInvocationRequested + ".#"},
	QueueInvocationHistory:  {TypeInvocationCompleted + ".#"},
	QueueJobCompleted:       {TypeInvocationCompleted + "." + string(TriggerJob)},
	QueueSchedulerCompleted: {TypeInvocationCompleted + "." + string(TriggerCron)},
	QueueCallbacks:          {TypeCallbackRequested},
	QueueDeadLetters:        {TypeInvocationDeadLettered},
}

// RoutingKey is the key a message is published with: its type, and for
// invocation messages the trigger kind, so that consumers can bind to the
// kinds they care about.
func RoutingKey(m Message) string {
	switch v := m.(type) {
	case *InvocationRequested:
		return v.Type() + "." + string(v.Trigger)
	case *InvocationCompleted:
		return v.Type() + "." + string(v.Trigger)
	case *InvocationBatch:
		return TypeInvocationCompleted + ".batch"
	default:
		return m.Type()
	}
}

// Decode decodes body as the message type named typ.
func Decode(typ string, body []byte) (Message, error) {
	var m Message
	switch typ {
	case TypeBuildRequested:
		m = &BuildRequested{}
	case TypeBuildCompleted:
		m = &BuildCompleted{}
	case TypeInvocationRequested:
		m = &InvocationRequested{}
	case TypeInvocationCompleted:
		m = &InvocationCompleted{}
	case TypeInvocationBatch:
		m = &InvocationBatch{}
	case TypeCallbackRequested:
		m = &CallbackRequested{}
	case TypeInvocationDeadLettered:
		m = &InvocationDeadLettered{}
	case TypeLoadReported:
		m = &LoadReported{}
	default:
		return nil, fmt.Errorf("decode message: unknown type %q", typ)
	}
	if err := json.Unmarshal(body, m); err != nil {
		return nil, fmt.Errorf("decode %s: %w", typ, err)
	}
	return m, nil
}

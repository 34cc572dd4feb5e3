package rabbit

import (
	"context"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/propagation"
)

// propagator carries W3C trace context and baggage.
var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// headerCarrier adapts AMQP headers to the OpenTelemetry carrier interface.
type headerCarrier amqp.Table

func (c headerCarrier) Get(key string) string {
	v, _ := c[key].(string)
	return v
}

func (c headerCarrier) Set(key, value string) { c[key] = value }

func (c headerCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// InjectTrace writes the trace context of ctx into h.
func InjectTrace(ctx context.Context, h amqp.Table) { propagator.Inject(ctx, headerCarrier(h)) }

// ExtractTrace returns ctx carrying the trace context found in h.
func ExtractTrace(ctx context.Context, h amqp.Table) context.Context {
	return propagator.Extract(ctx, headerCarrier(h))
}

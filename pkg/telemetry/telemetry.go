// Package telemetry sets up what every sless service reports: a log/slog JSON
// logger, an OpenTelemetry tracer provider configured from the standard
// OTEL_* variables, a Prometheus registry with its /metrics handler, and the
// HTTP middleware that records request spans and metrics.
package telemetry

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// NewLogger returns a JSON logger writing to w at the given level
// (debug, info, warn, error; default info).
func NewLogger(w io.Writer, service, level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})).With("service", service)
}

// Propagator carries W3C trace context and baggage over HTTP and AMQP.
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// NewTracerProvider returns a tracer provider for service. Spans are
// exported over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set (the exporter reads the other
// OTEL_EXPORTER_OTLP_* variables itself) and OTEL_TRACES_EXPORTER is not
// "none"; otherwise spans are created for context propagation but not exported.
func NewTracerProvider(ctx context.Context, service string, getenv func(string) string) (*sdktrace.TracerProvider, error) {
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		semconv.ServiceName(service),
		semconv.ServiceNamespace("sless"),
	))
	if err != nil {
		return nil, fmt.Errorf("telemetry resource: %w", err)
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res), sdktrace.WithIDGenerator(ids{})}
	endpoint := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") + getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	if endpoint != "" && !strings.EqualFold(getenv("OTEL_TRACES_EXPORTER"), "none") {
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("otlp exporter: %w", err)
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	} else {
		// Nothing would receive the spans: create them non-recording, which
		// still gives every request trace and span ids to propagate.
		opts = append(opts, sdktrace.WithSampler(sdktrace.NeverSample()))
	}
	return sdktrace.NewTracerProvider(opts...), nil
}

// ids makes trace and span ids from the runtime's random source
// (math/rand/v2: per thread, seeded from the system's randomness), where
// the SDK's default generator takes one lock shared by every span of the
// process: each request's span on the data path.
type ids struct{}

func (ids) NewIDs(context.Context) (trace.TraceID, trace.SpanID) {
	var t trace.TraceID
	for !t.IsValid() {
		binary.NativeEndian.PutUint64(t[:8], rand.Uint64())
		binary.NativeEndian.PutUint64(t[8:], rand.Uint64())
	}
	return t, newSpanID()
}

func (ids) NewSpanID(context.Context, trace.TraceID) trace.SpanID { return newSpanID() }

func newSpanID() trace.SpanID {
	var s trace.SpanID
	for !s.IsValid() {
		binary.NativeEndian.PutUint64(s[:], rand.Uint64())
	}
	return s
}

// NewRegistry returns a Prometheus registry with the Go and process collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// MetricsHandler serves the metrics of g in the Prometheus text format.
func MetricsHandler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{})
}

// Shutdown flushes and stops the tracer provider, ignoring a cancelled context.
func Shutdown(ctx context.Context, tp *sdktrace.TracerProvider) error {
	if err := tp.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

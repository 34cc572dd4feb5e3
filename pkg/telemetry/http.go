package telemetry

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/kube5s/sless/pkg/headers"
)

// HTTPMetrics are the request metrics of one service's HTTP server.
type HTTPMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec

	mu     sync.RWMutex
	series map[routeKey]routeSeries // the vectors' children, found once (no series is ever deleted)
}

type routeKey struct {
	route, method string
	code          int
}

type routeSeries struct {
	requests prometheus.Counter
	duration prometheus.Observer
}

// of returns the series of a route, method and status code. The vectors'
// own lookup hashes and validates every label on every request.
func (m *HTTPMetrics) of(route, method string, code int) routeSeries {
	k := routeKey{route: route, method: method, code: code}
	m.mu.RLock()
	s, ok := m.series[k]
	m.mu.RUnlock()
	if !ok {
		s = routeSeries{requests: m.requests.WithLabelValues(route, method, strconv.Itoa(code)), duration: m.duration.WithLabelValues(route, method)}
		m.mu.Lock()
		m.series[k] = s
		m.mu.Unlock()
	}
	return s
}

// NewHTTPMetrics registers sless_<service>_http_requests_total and
// sless_<service>_http_request_duration_seconds on reg.
func NewHTTPMetrics(reg prometheus.Registerer, service string) *HTTPMetrics {
	m := &HTTPMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sless_" + service + "_http_requests_total",
			Help: "HTTP requests served, by route pattern, method and status code.",
		}, []string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sless_" + service + "_http_request_duration_seconds",
			Help:    "HTTP request latency, by route pattern and method.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"route", "method"}),
		series: map[routeKey]routeSeries{},
	}
	reg.MustRegister(m.requests, m.duration)
	return m
}

// serverSpan is the option of every request's span, made once.
var serverSpan = trace.WithSpanKind(trace.SpanKindServer)

// RouteFunc names the route of a request for metrics and span names, such as
// the router's pattern; it is called after the handler ran.
type RouteFunc func(*http.Request) string

// Middleware records a server span (continuing an incoming traceparent) and
// the request metrics around next.
func Middleware(tracer trace.Tracer, prop propagation.TextMapPropagator, m *HTTPMetrics, route RouteFunc) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			method := methodLabel(r.Method)
			ctx := prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
			ctx, span := tracer.Start(ctx, method, serverSpan)
			defer span.End()
			// Attributes are built for a span that records only: they cost
			// every request allocations, and no sampler the platform
			// configures reads them at the start.
			recording := span.IsRecording()
			if recording {
				span.SetAttributes(semconv.HTTPRequestMethodKey.String(method), semconv.URLPath(r.URL.Path))
			}
			// The caller can look its request up in the traces backend.
			w.Header().Set("X-Trace-Id", span.SpanContext().TraceID().String())
			sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
			r = r.WithContext(ctx)
			next.ServeHTTP(sw, r)

			name := route(r)
			if name == "" {
				name = "unmatched"
			}
			if recording {
				span.SetName(method + " " + name)
				span.SetAttributes(semconv.HTTPRoute(name), semconv.HTTPResponseStatusCode(sw.code), attribute.Int64("http.response.body.size", sw.n))
			}
			if sw.code >= 500 {
				span.SetStatus(codes.Error, http.StatusText(sw.code))
			}
			series := m.of(name, method, sw.code)
			series.requests.Inc()
			series.duration.Observe(time.Since(start).Seconds())
		})
	}
}

// methodLabel is the request's method as the metrics and spans name it:
// one of HTTP's own, or _OTHER (OpenTelemetry's name for the rest). A
// caller chooses the method, and each new label value would be a series
// kept for the life of the process.
func methodLabel(m string) string {
	if headers.StandardMethod(m) {
		return m
	}
	return "_OTHER"
}

type statusWriter struct {
	http.ResponseWriter
	code  int
	n     int64
	wrote bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.code, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	n, err := w.ResponseWriter.Write(b)
	w.n += int64(n)
	return n, err
}

// Flush lets streaming handlers (build logs) flush through the middleware.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

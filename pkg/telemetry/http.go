package telemetry

import (
	"context"
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

	// series are the vectors' children, found once (no series is ever
	// deleted): routeKey -> routeSeries. A sync.Map, whose reads of a
	// known key write nothing shared, where a read lock's count would
	// move between the cores on every request.
	series sync.Map
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
	if s, ok := m.series.Load(k); ok {
		return s.(routeSeries)
	}
	s, _ := m.series.LoadOrStore(k, routeSeries{requests: m.requests.WithLabelValues(route, method, strconv.Itoa(code)), duration: m.duration.WithLabelValues(route, method)})
	return s.(routeSeries)
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
	}
	reg.MustRegister(m.requests, m.duration)
	return m
}

// serverSpan is the option of every request's span, made once.
var serverSpan = trace.WithSpanKind(trace.SpanKindServer)

// RouteFunc names the route of a request for metrics and span names, such as
// the router's pattern; it is called after the handler ran.
type RouteFunc func(*http.Request) string

// Server is the request telemetry of one service's HTTP server: a server
// span per request (continuing an incoming traceparent) and the request
// metrics. Middleware applies it around a handler; a handler served
// outside the router (the gateway's invoke route) calls Begin and End
// itself, with the Exchange in its own per-request value.
type Server struct {
	Tracer  trace.Tracer
	Prop    propagation.TextMapPropagator
	Metrics *HTTPMetrics
}

// Exchange is the telemetry of one request while it is served: its span,
// and its status and size as the handler writes them.
type Exchange struct {
	sw        statusWriter
	start     time.Time
	method    string
	span      trace.Span
	recording bool
	traceID   [1]string // the X-Trace-Id header's value, set without a slice of its own
}

// Begin starts x for r: the span (its trace id in X-Trace-Id, so that the
// caller can look its request up in the traces backend) and the clock. It
// returns the context that carries the span and the writer that keeps
// the status; the handler writes through it, End records x once the
// handler returned, and x.Close, deferred, ends the span however the
// handler ended (a panic that cuts the response short is not counted, as
// no status describes it).
func (s *Server) Begin(x *Exchange, w http.ResponseWriter, r *http.Request) (context.Context, http.ResponseWriter) {
	x.start = time.Now()
	x.method = methodLabel(r.Method)
	ctx := s.Prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, x.span = s.Tracer.Start(ctx, x.method, serverSpan)
	// Attributes are built for a span that records only: they cost every
	// request allocations, and no sampler the platform configures reads
	// them at the start.
	x.recording = x.span.IsRecording()
	if x.recording {
		x.span.SetAttributes(semconv.HTTPRequestMethodKey.String(x.method), semconv.URLPath(r.URL.Path))
	}
	x.traceID[0] = x.span.SpanContext().TraceID().String()
	w.Header()["X-Trace-Id"] = x.traceID[:]
	x.sw = statusWriter{ResponseWriter: w, code: http.StatusOK}
	return ctx, &x.sw
}

// End records x as a request of route ("" is "unmatched"): its metrics,
// and its span's name, attributes and status.
func (s *Server) End(x *Exchange, route string) {
	if route == "" {
		route = "unmatched"
	}
	code := x.sw.code
	if x.recording {
		x.span.SetName(x.method + " " + route)
		x.span.SetAttributes(semconv.HTTPRoute(route), semconv.HTTPResponseStatusCode(code), attribute.Int64("http.response.body.size", x.sw.n))
	}
	if code >= 500 {
		x.span.SetStatus(codes.Error, http.StatusText(code))
	}
	series := s.Metrics.of(route, x.method, code)
	series.requests.Inc()
	series.duration.Observe(time.Since(x.start).Seconds())
}

// Close ends x's span.
func (x *Exchange) Close() { x.span.End() }

// Middleware applies the request telemetry of s around next; route names
// the request's route after next ran.
func (s *Server) Middleware(route RouteFunc) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			x := &Exchange{}
			ctx, sw := s.Begin(x, w, r)
			defer x.Close()
			r = r.WithContext(ctx)
			next.ServeHTTP(sw, r)
			s.End(x, route(r))
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

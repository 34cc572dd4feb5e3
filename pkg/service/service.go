// Package service owns the skeleton every sless service runs in: the JSON
// logger, the tracer provider, the metrics registry, the ops server
// (/healthz, /readyz, /metrics) and the errgroup that owns every goroutine.
package service

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kube5s/sless/pkg/envconf"
	"github.com/kube5s/sless/pkg/health"
	"github.com/kube5s/sless/pkg/rabbit"
	"github.com/kube5s/sless/pkg/telemetry"
)

// Common is the configuration every service shares.
type Common struct {
	LogLevel   string        // LOG_LEVEL: debug, info, warn, error
	OpsAddr    string        // SLESS_OPS_ADDR: /healthz, /readyz, /metrics
	DrainDelay time.Duration // SLESS_DRAIN_DELAY: readiness fails this long before shutdown
	// SLESS_HTTP_READ_HEADER_TIMEOUT and SLESS_HTTP_READ_TIMEOUT bound how
	// long a client may take to send a request's header and all of it, so
	// that slow clients cannot hold connections open forever. The read
	// deadline ends once the body is read: long calls are not cut.
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	// QueueLimits bound every platform queue (SLESS_RABBITMQ_QUEUE_MAX_MESSAGES,
	// SLESS_RABBITMQ_QUEUE_MAX_MB); every service must be given the same.
	QueueLimits rabbit.Limits
}

// ReadCommon reads the shared settings.
func ReadCommon(r *envconf.Reader, defaultOpsAddr string) Common {
	return Common{
		LogLevel:   r.OneOf("LOG_LEVEL", "info", "debug", "info", "warn", "error"),
		OpsAddr:    r.String("SLESS_OPS_ADDR", defaultOpsAddr),
		DrainDelay: r.Duration("SLESS_DRAIN_DELAY", 0),
		// 5 minutes: a 50 MiB source upload at 170 KiB/s.
		ReadHeaderTimeout: r.Duration("SLESS_HTTP_READ_HEADER_TIMEOUT", 10*time.Second),
		ReadTimeout:       r.Duration("SLESS_HTTP_READ_TIMEOUT", 5*time.Minute),
		QueueLimits: rabbit.Limits{
			Messages: r.Int("SLESS_RABBITMQ_QUEUE_MAX_MESSAGES", rabbit.DefaultLimits.Messages, 1, 100_000_000),
			Bytes:    int64(r.Int("SLESS_RABBITMQ_QUEUE_MAX_MB", int(rabbit.DefaultLimits.Bytes>>20), 1, 1<<20)) << 20,
		},
	}
}

// Service is one running sless service.
type Service struct {
	Name     string
	Log      *slog.Logger
	Provider *sdktrace.TracerProvider
	Tracer   trace.Tracer
	Registry *prometheus.Registry
	Health   *health.Handler

	cfg       Common
	tasks     []func(context.Context) error
	serving   sync.WaitGroup // the servers of Serve, until each shut down
	stopped   chan struct{}  // closed once they all have (ServersStopped)
	gatherers prometheus.Gatherers
	crMetrics bool // controller-runtime's registry is among the gatherers
}

// kubeLogs sends the Kubernetes libraries' logs to the first service's log.
var kubeLogs sync.Once

// New builds the shared parts of a service.
func New(ctx context.Context, name string, cfg Common, getenv func(string) string, stdout io.Writer) (*Service, error) {
	log := telemetry.NewLogger(stdout, name, cfg.LogLevel)
	// The Kubernetes libraries log through logr (controller-runtime: reconcile
	// errors, leader election) and klog (client-go: watch errors). Both go
	// to the service's JSON log; otherwise controller-runtime drops its logs
	// and prints a stack trace about it after 30 s.
	//
	// Once per process: a process runs one service, and a test that
	// starts several in one process keeps the first one's (controller-
	// runtime keeps only the first logger it is given anyway, and
	// client-go's goroutines read klog's without a lock).
	kubeLogs.Do(func() {
		kl := logr.FromSlogHandler(log.Handler())
		ctrllog.SetLogger(kl)
		klog.SetLogger(kl)
	})
	tp, err := telemetry.NewTracerProvider(ctx, name, getenv)
	if err != nil {
		return nil, err
	}
	reg := telemetry.NewRegistry()
	s := &Service{
		Name:      name,
		Log:       log,
		Provider:  tp,
		Tracer:    tp.Tracer("github.com/kube5s/sless/services/" + name),
		Registry:  reg,
		cfg:       cfg,
		stopped:   make(chan struct{}),
		gatherers: prometheus.Gatherers{reg},
	}
	s.Health = health.NewHandler(prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return s.gatherers.Gather() }))
	return s, nil
}

// AddGatherer serves the metrics of another registry (a library's own) on
// /metrics too.
func (s *Service) AddGatherer(g prometheus.Gatherer) { s.gatherers = append(s.gatherers, g) }

// Go adds a task that runs until the service stops; a task that returns an
// error stops the service.
func (s *Service) Go(task func(context.Context) error) { s.tasks = append(s.tasks, task) }

// Serve adds an HTTP server on addr that drains and shuts down with the service.
func (s *Service) Serve(addr string, h http.Handler) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: s.cfg.ReadHeaderTimeout, ReadTimeout: s.cfg.ReadTimeout, IdleTimeout: 90 * time.Second}
	s.serving.Add(1)
	s.Go(func(ctx context.Context) error {
		defer s.serving.Done()
		return health.Serve(ctx, s.Log, srv, ln, s.Health, s.cfg.DrainDelay)
	})
	return ln.Addr(), nil
}

// ServersStopped is closed once every server of Serve has shut down after
// the service's stop (its drain delay, then its requests' end): no request
// is answered any more. A task whose work follows the answers (the
// gateway's records) waits for it before it finishes that work.
func (s *Service) ServersStopped() <-chan struct{} { return s.stopped }

// Run serves the ops endpoints, runs every task until ctx ends or one fails,
// and flushes traces.
func (s *Service) Run(ctx context.Context) error {
	addr, err := s.Serve(s.cfg.OpsAddr, s.Health)
	if err != nil {
		return err
	}
	s.Log.Info("service started", "opsAddr", addr.String())
	go func() { s.serving.Wait(); close(s.stopped) }()
	g, gctx := errgroup.WithContext(ctx)
	for _, t := range s.tasks {
		g.Go(func() error { return t(gctx) })
	}
	err = g.Wait()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if terr := telemetry.Shutdown(sctx, s.Provider); terr != nil {
		s.Log.Warn("flush traces", "err", terr)
	}
	if err != nil {
		return err
	}
	s.Log.Info("service stopped")
	return nil
}

// Package health owns the operational HTTP surface every sless service
// exposes (/healthz, /readyz, /metrics) and the drain-then-shutdown lifecycle
// of a service's HTTP servers.
package health

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kube5s/sless/pkg/telemetry"
)

// Check reports whether one dependency is usable.
type Check struct {
	Name string
	Fn   func(context.Context) error
}

// Handler serves /healthz (the process is alive), /readyz (every check
// passes and the service is not draining) and /metrics.
type Handler struct {
	mux      *http.ServeMux
	mu       sync.RWMutex
	checks   []Check
	draining atomic.Bool
}

// NewHandler returns the handler with the given readiness checks.
func NewHandler(metrics prometheus.Gatherer, checks ...Check) *Handler {
	h := &Handler{mux: http.NewServeMux(), checks: checks}
	h.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	})
	h.mux.HandleFunc("GET /readyz", h.ready)
	h.mux.Handle("GET /metrics", telemetry.MetricsHandler(metrics))
	return h
}

// AddCheck adds a readiness check.
func (h *Handler) AddCheck(c Check) {
	h.mu.Lock()
	h.checks = append(h.checks, c)
	h.mu.Unlock()
}

// Drain makes /readyz fail from now on, so load balancers stop sending work.
func (h *Handler) Drain() { h.draining.Store(true) }

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

func (h *Handler) ready(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	failed := map[string]string{}
	if h.draining.Load() {
		failed["shutdown"] = "draining"
	}
	h.mu.RLock()
	checks := h.checks
	h.mu.RUnlock()
	for _, c := range checks {
		if err := c.Fn(ctx); err != nil {
			failed[c.Name] = err.Error()
		}
	}
	w.Header().Set("Content-Type", "application/json")
	if len(failed) > 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(map[string]any{"status": "not ready", "failed": failed})
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"status": "ready"})
}

// Serve runs srv on ln until ctx ends; then it marks h draining, waits drain
// so that readiness probes notice, and shuts the server down gracefully.
func Serve(ctx context.Context, log *slog.Logger, srv *http.Server, ln net.Listener, h *Handler, drain time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	if h != nil {
		h.Drain()
	}
	if drain > 0 {
		log.Info("draining before shutdown", "addr", ln.Addr().String(), "delay", drain.String())
		time.Sleep(drain)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown %s: %w", ln.Addr(), err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

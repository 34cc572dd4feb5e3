package main

import (
	"io"
	"log/slog"
	"testing"

	"github.com/go-chi/chi/v5"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/kube5s/sless/pkg/health"
	"github.com/kube5s/sless/pkg/telemetry"
	"github.com/kube5s/sless/services/gateway/internal/api"
)

// newTestRouter builds the API router without dependencies, to walk its routes.
func newTestRouter(t *testing.T) chi.Router {
	reg := telemetry.NewRegistry()
	srv := api.New(api.Deps{Health: health.NewHandler(reg), Registry: reg,
		Tracer: noop.NewTracerProvider().Tracer("t"), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Config: api.Config{MaxSourceBytes: 1 << 20}})
	return srv.Router()
}

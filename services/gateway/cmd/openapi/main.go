// Command openapi prints the gateway's OpenAPI document, built in-process
// from the same operations the gateway serves, in the OpenAPI 3.0 form
// (huma's downgrade of its 3.1 document) that oapi-codegen reads. `make
// generate` writes it to pkg/client/openapi.yaml and generates the Go
// client from it.
package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"

	"go.opentelemetry.io/otel/trace/noop"

	"github.com/kube5s/sless/pkg/health"
	"github.com/kube5s/sless/pkg/telemetry"
	"github.com/kube5s/sless/services/gateway/internal/api"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "openapi:", err)
		os.Exit(1)
	}
}

func run(w io.Writer) error {
	reg := telemetry.NewRegistry()
	srv := api.New(api.Deps{Health: health.NewHandler(reg), Registry: reg,
		Tracer: noop.NewTracerProvider().Tracer("openapi"), Log: slog.New(slog.DiscardHandler),
		Config: api.Config{MaxSourceBytes: 64 << 20}})
	b, err := srv.OpenAPI().DowngradeYAML()
	if err != nil {
		return fmt.Errorf("downgrade the document to OpenAPI 3.0: %w", err)
	}
	_, err = w.Write(b)
	return err
}

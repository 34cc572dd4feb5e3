package health

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kube5s/sless/pkg/telemetry"
)

func TestReadinessFollowsChecksAndDrain(t *testing.T) {
	var broken error
	h := NewHandler(telemetry.NewRegistry(), Check{Name: "db", Fn: func(context.Context) error { return broken }})
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Fatalf("/healthz = %d, want 200", code)
	}
	if code, _ := get("/readyz"); code != 200 {
		t.Fatalf("/readyz with passing checks = %d, want 200", code)
	}
	broken = errors.New("connection refused")
	code, body := get("/readyz")
	if code != 503 || !strings.Contains(body, "connection refused") {
		t.Fatalf("/readyz with a failing check = %d %q, want 503 naming the error", code, body)
	}
	broken = nil
	h.Drain()
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "draining") {
		t.Fatalf("/readyz while draining = %d %q, want 503 draining", code, body)
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, "go_goroutines") {
		t.Fatalf("/metrics = %d, want 200 with Go collector output", code)
	}
}

func TestServeShutsDownWhenContextEnds(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := NewHandler(telemetry.NewRegistry())
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)), &http.Server{Handler: h}, ln, h, 10*time.Millisecond)
	}()
	resp, err := http.Get("http://" + ln.Addr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve returned %v, want nil after a clean shutdown", err)
	}
	if _, err := http.Get("http://" + ln.Addr().String() + "/healthz"); err == nil {
		t.Fatal("server still answers after shutdown")
	}
}

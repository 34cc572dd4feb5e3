package main

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestLogsShowTheVersion: 'sless logs' prints each record's version (the
// API's function_version) after its time, '-' when the record has none;
// the gateway is a stand-in answering with records as the real one does.
func TestLogsShowTheVersion(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/tenants/acme/functions/hello/logs" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		fmt.Fprintln(w, `{"time":"2026-12-06T10:00:00.001Z","stream":"stdout","level":"info","message":"greeting sless","invocation_id":"inv-1","function_version":7}`)
		fmt.Fprintln(w, `{"time":"2026-12-06T10:00:00.002Z","stream":"raw","message":"from a child process"}`)
	}))
	defer srv.Close()
	env := map[string]string{"SLESS_URL": srv.URL, "SLESS_TOKEN": "t", "SLESS_TENANT": "acme", "XDG_CONFIG_HOME": t.TempDir()}
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"logs", "hello"}, func(k string) string { return env[k] }, strings.NewReader(""), &stdout, &stderr)
	if code != exitOK {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, stdout.String(), stderr.String())
	}
	at := func(ms int) string {
		return time.Date(2026, 12, 6, 10, 0, 0, ms*int(time.Millisecond), time.UTC).Local().Format("15:04:05.000")
	}
	want := at(1) + " v7 inv-1 stdout greeting sless\n" + at(2) + " - - raw from a child process\n"
	if stdout.String() != want {
		t.Errorf("sless logs printed\n%s\nwant\n%s", stdout.String(), want)
	}
}

package api

import (
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace/noop"

	"github.com/kube5s/sless/pkg/headers"
	"github.com/kube5s/sless/pkg/health"
	"github.com/kube5s/sless/pkg/telemetry"
)

// TestOpenAPIDescribesTheClientAdditions: the typed client is generated
// from the document, so the operations the CLI and the Terraform provider
// need carry their schemas: the PUT bodies with read-only fields, the wait
// parameters and header, and the log records.
func TestOpenAPIDescribesTheClientAdditions(t *testing.T) {
	reg := telemetry.NewRegistry()
	s := New(Deps{Health: health.NewHandler(reg), Registry: reg, Tracer: noop.NewTracerProvider().Tracer("t"),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Config: Config{MaxSourceBytes: 1 << 20}})
	b, err := json.Marshal(s.OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]struct {
			Parameters []struct {
				Name string `json:"name"`
				In   string `json:"in"`
			} `json:"parameters"`
			RequestBody struct {
				Content map[string]struct {
					Schema struct {
						Ref string `json:"$ref"`
					} `json:"schema"`
				} `json:"content"`
			} `json:"requestBody"`
			Responses map[string]struct {
				Headers map[string]any `json:"headers"`
				Content map[string]struct {
					Schema struct {
						Ref string `json:"$ref"`
					} `json:"schema"`
				} `json:"content"`
			} `json:"responses"`
		} `json:"paths"`
		Components struct {
			Schemas map[string]struct {
				Properties map[string]struct {
					ReadOnly bool   `json:"readOnly"`
					Ref      string `json:"$ref"`
				} `json:"properties"`
				Required []string `json:"required"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	ref := func(name string) string { return "#/components/schemas/" + name }

	for path, body := range map[string]string{
		"/v1/tenants/{t}/functions/{name}": "FunctionReplacement",
		"/v1/tenants/{t}/triggers/{name}":  "TriggerReplacement",
		"/v1/tenants/{t}/jobs/{name}":      "JobReplacement",
	} {
		put := doc.Paths[path]["put"]
		if got := put.RequestBody.Content["application/json"].Schema.Ref; got != ref(body) {
			t.Errorf("PUT %s body %q, want %s", path, got, body)
		}
		// A PUT that creates answers 201 with the object, as one that
		// replaces answers 200: a generated client must read both.
		created, ok := put.Responses["201"]
		if !ok || created.Content["application/json"].Schema.Ref != put.Responses["200"].Content["application/json"].Schema.Ref {
			t.Errorf("PUT %s does not document its 201 with the object of its 200", path)
		}
		s := doc.Components.Schemas[body]
		for _, ro := range []string{"status", "created_at"} {
			if !s.Properties[ro].ReadOnly {
				t.Errorf("%s.%s is not read-only", body, ro)
			}
		}
		for _, req := range s.Required {
			if req == "name" || req == "status" || req == "created_at" {
				t.Errorf("%s requires %s", body, req)
			}
		}
	}
	if !doc.Components.Schemas["FunctionReplacement"].Properties["source"].ReadOnly {
		t.Error("FunctionReplacement.source is not read-only")
	}

	get := doc.Paths["/v1/tenants/{t}/functions/{name}"]["get"]
	var params []string
	for _, p := range get.Parameters {
		params = append(params, p.In+":"+p.Name)
	}
	if ps := strings.Join(params, ","); !strings.Contains(ps, "query:wait") || !strings.Contains(ps, "query:timeout") {
		t.Errorf("get-function parameters %s", ps)
	}
	if _, ok := get.Responses["200"].Headers[headers.Wait]; !ok {
		t.Error("get-function does not document X-Sless-Wait")
	}

	logs := doc.Paths["/v1/tenants/{t}/functions/{name}/logs"]["get"]
	if got := logs.Responses["200"].Content["application/x-ndjson"].Schema.Ref; got != ref("LogRecord") {
		t.Errorf("logs 200 schema %q", got)
	}
	rec := doc.Components.Schemas["LogRecord"]
	for _, f := range []string{"time", "stream", "message", "invocation_id", "level", "truncated"} {
		if _, ok := rec.Properties[f]; !ok {
			t.Errorf("LogRecord has no %s", f)
		}
	}
	params = nil
	for _, p := range logs.Parameters {
		params = append(params, p.Name)
	}
	if ps := strings.Join(params, ","); ps != "t,name,follow,since,tail" {
		t.Errorf("logs parameters %s", ps)
	}

	// The tokens list: what the console's admin pages and 'sless tokens
	// list' show, and never a secret.
	if doc.Paths["/v1/tenants/{t}/tokens"]["get"].Responses["200"].Content["application/json"].Schema.Ref == "" {
		t.Error("list-tokens has no documented 200")
	}
	tok := doc.Components.Schemas["Token"]
	for _, f := range []string{"id", "name", "created_at", "last_used_at", "revoked_at"} {
		if _, ok := tok.Properties[f]; !ok {
			t.Errorf("Token has no %s", f)
		}
	}
	for f := range tok.Properties {
		if strings.Contains(f, "hash") || f == "token" {
			t.Errorf("Token shows %s", f)
		}
	}
}

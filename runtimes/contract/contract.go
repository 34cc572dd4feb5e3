// Package contract runs the runtime contract's fixtures
// (runtimes/fixtures/contract.json) against a serving runtime from Go
// tests: a runtime process, or an assembled function image's entrypoint.
// The runtime must serve the fixture handler (runtimes.FixtureHandler).
package contract

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/kube5s/sless/runtimes"
)

// Fixture is one request and what its response must be.
type Fixture struct {
	Name    string `json:"name"`
	Request struct {
		Method     string            `json:"method"`
		Path       string            `json:"path"`
		Query      string            `json:"query"`
		Headers    map[string]string `json:"headers"`
		Body       *string           `json:"body"`
		BodyBase64 *string           `json:"bodyBase64"`
	} `json:"request"`
	Response struct {
		Status         int               `json:"status"`
		Headers        map[string]string `json:"headers"`
		HeadersPresent []string          `json:"headersPresent"`
		HeadersAbsent  []string          `json:"headersAbsent"`
		Body           *string           `json:"body"`
		BodyBase64     *string           `json:"bodyBase64"`
		JSON           json.RawMessage   `json:"json"`
		JSONSubset     map[string]any    `json:"jsonSubset"`
		BodyExcludes   []string          `json:"bodyExcludes"`
		BodyContains   []string          `json:"bodyContains"`
	} `json:"response"`
}

// Fixtures are the contract's fixtures, in their file's order (some
// depend on it: "the runtime answers after invalid responses").
func Fixtures() ([]Fixture, error) {
	var fs []Fixture
	if err := json.Unmarshal(runtimes.ContractFixtures(), &fs); err != nil {
		return nil, fmt.Errorf("contract.json: %w", err)
	}
	return fs, nil
}

// Run checks every fixture, in order, against the runtime at endpoint
// (http://host:port) serving function of tenant, each as a subtest.
func Run(t *testing.T, endpoint, function, tenant string) {
	t.Helper()
	fs, err := Fixtures()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		t.Run(f.Name, func(t *testing.T) { f.Check(t, endpoint, function, tenant) })
	}
}

// Check sends the fixture's request to endpoint and checks the response.
// The fixtures name the function "fixtures" and the tenant "test"; a JSON
// body that names them is compared with function and tenant instead.
func (f Fixture) Check(t testing.TB, endpoint, function, tenant string) {
	t.Helper()
	var body io.Reader
	if f.Request.Body != nil {
		body = strings.NewReader(*f.Request.Body)
	} else if f.Request.BodyBase64 != nil {
		raw, err := base64.StdEncoding.DecodeString(*f.Request.BodyBase64)
		if err != nil {
			t.Fatalf("fixture body: %v", err)
		}
		body = strings.NewReader(string(raw))
	}
	url := endpoint + f.Request.Path
	if f.Request.Query != "" {
		url += "?" + f.Request.Query
	}
	req, err := http.NewRequestWithContext(t.Context(), f.Request.Method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range f.Request.Headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	want := f.Response
	if resp.StatusCode != want.Status {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, want.Status, got)
	}
	for k, v := range want.Headers {
		if resp.Header.Get(k) != v {
			t.Errorf("header %s = %q, want %q", k, resp.Header.Get(k), v)
		}
	}
	for _, k := range want.HeadersPresent {
		if resp.Header.Get(k) == "" {
			t.Errorf("header %s missing", k)
		}
	}
	for _, k := range want.HeadersAbsent {
		if v, ok := resp.Header[http.CanonicalHeaderKey(k)]; ok {
			t.Errorf("header %s present: %q", k, v)
		}
	}
	if want.Body != nil && string(got) != *want.Body {
		t.Errorf("body %q, want %q", got, *want.Body)
	}
	if want.BodyBase64 != nil {
		raw, err := base64.StdEncoding.DecodeString(*want.BodyBase64)
		if err != nil {
			t.Fatalf("fixture body: %v", err)
		}
		if string(raw) != string(got) {
			t.Errorf("body bytes differ: got %d bytes, want %d", len(got), len(raw))
		}
	}
	if len(want.JSON) > 0 {
		var w, g any
		if err := json.Unmarshal(want.JSON, &w); err != nil {
			t.Fatalf("fixture json: %v", err)
		}
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("body is not JSON: %s", got)
		}
		if m, ok := w.(map[string]any); ok && m["function"] != nil {
			m["function"], m["tenant"] = function, tenant
		}
		wj, _ := json.Marshal(w)
		gj, _ := json.Marshal(g)
		if string(wj) != string(gj) {
			t.Errorf("json body\n got %s\nwant %s", gj, wj)
		}
	}
	if want.JSONSubset != nil {
		var g map[string]any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("body is not JSON: %s", got)
		}
		for k, v := range want.JSONSubset {
			if fmt.Sprint(g[k]) != fmt.Sprint(v) {
				t.Errorf("field %s = %v, want %v", k, g[k], v)
			}
		}
	}
	for _, s := range want.BodyExcludes {
		if strings.Contains(string(got), s) {
			t.Errorf("body leaks %q: %s", s, got)
		}
	}
	for _, s := range want.BodyContains {
		if !strings.Contains(string(got), s) {
			t.Errorf("body lacks %q: %s", s, got)
		}
	}
}

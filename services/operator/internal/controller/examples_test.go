package controller

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
)

type example struct {
	Runtime    slessv1.Runtime `json:"runtime"`
	Entrypoint string          `json:"entrypoint"`
	Requests   []struct {
		Method       string `json:"method"`
		Path         string `json:"path"`
		Body         string `json:"body"`
		ContentType  string `json:"contentType"`
		Status       int    `json:"status"`
		BodyContains string `json:"bodyContains"`
	} `json:"requests"`
}

// TestExamplesDeployAndAnswer deploys every example through the local
// driver, as built artifacts, and sends the requests its example.json lists.
func TestExamplesDeployAndAnswer(t *testing.T) {
	root := filepath.Join("..", "..", "..", "..", "examples")
	dirs, err := filepath.Glob(filepath.Join(root, "*", "example.json"))
	if err != nil || len(dirs) < 4 {
		t.Fatalf("found %d examples (%v), want at least 4", len(dirs), err)
	}
	h, _ := localHarness(t)
	_, ns := h.tenant(t)
	for _, spec := range dirs {
		dir := filepath.Dir(spec)
		name := filepath.Base(dir)
		t.Run(name, func(t *testing.T) {
			var ex example
			b, err := os.ReadFile(spec)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &ex); err != nil {
				t.Fatal(err)
			}
			art := t.TempDir()
			if err := os.CopyFS(art, os.DirFS(dir)); err != nil {
				t.Fatal(err)
			}
			fn := h.function(t, ns, name, func(f *slessv1.Function) {
				withSource(sha1)(f)
				f.Spec.Runtime, f.Spec.Entrypoint = ex.Runtime, ex.Entrypoint
				f.Spec.Env = []slessv1.EnvVar{{Name: "NOTES_DB", Value: filepath.Join(art, "notes.db")}}
			})
			h.build(t, fn, art)
			h.waitReady(t, fn)
			for _, r := range ex.Requests {
				req, _ := http.NewRequestWithContext(t.Context(), r.Method, fn.Status.Endpoint+r.Path, strings.NewReader(r.Body))
				if r.ContentType != "" {
					req.Header.Set("Content-Type", r.ContentType)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != r.Status || !strings.Contains(string(body), r.BodyContains) {
					t.Errorf("%s %s = %d %s, want %d containing %q", r.Method, r.Path, resp.StatusCode, body, r.Status, r.BodyContains)
				}
			}
		})
	}
}

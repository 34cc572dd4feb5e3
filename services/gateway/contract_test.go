package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
)

// TestUploadRefusesWhatTheBuilderWould: an archive whose central directory
// shows that the build must fail (too many entries, too many declared
// bytes, no entrypoint file) is refused at upload with 422 and its reason,
// and the function is left as it was.
func TestUploadRefusesWhatTheBuilderWould(t *testing.T) {
	g := gateway(t).replica(t, map[string]string{"SLESS_BUILD_MAX_ENTRIES": "20", "SLESS_BUILD_MAX_UNPACKED_BYTES": "100000"})
	ten, tok := g.tenant(t, nil)
	base := "/v1/tenants/" + ten + "/functions"
	expect(t, g.call(t, "POST", base, tok, fnBody), 201, "create")
	good := "def handler(e, c):\n    return 'hi'\n"
	many := map[string]string{"main.py": good}
	for i := range 20 {
		many[fmt.Sprintf("f%02d.txt", i)] = "x"
	}
	tests := []struct {
		name    string
		files   map[string]string
		typ     string
		mention string
	}{
		{"more entries than the limit", many, "archive-too-large", "21 entries"},
		{"more declared bytes than the limit", map[string]string{"main.py": good, "data.bin": strings.Repeat("0", 60000), "more.bin": strings.Repeat("1", 60000)},
			"archive-too-large", "100000"},
		{"no entrypoint file", map[string]string{"app.py": good}, "missing-entrypoint", "main.py"},
		{"entrypoint only in a subdirectory", map[string]string{"src/main.py": good}, "missing-entrypoint", "main.py"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := g.call(t, "PUT", base+"/hello/source", tok, zipOf(t, tt.files), "Content-Type", "application/zip")
			expect(t, r, 422, tt.name)
			p := r.json(t)
			if p["type"] != "https://sless.kube5s.ru/problems/"+tt.typ || !strings.Contains(fmt.Sprint(p["detail"]), tt.mention) {
				t.Errorf("problem %v; want type %s and a detail mentioning %q", p, tt.typ, tt.mention)
			}
		})
	}
	var f slessv1.Function
	if err := g.kube.Get(t.Context(), client.ObjectKey{Namespace: slessv1.NamespaceFor(ten), Name: "hello"}, &f); err != nil {
		t.Fatal(err)
	}
	if f.Spec.Source != nil {
		t.Fatalf("a refused upload changed the function: %+v", f.Spec.Source)
	}
	expect(t, g.call(t, "PUT", base+"/hello/source", tok, zipOf(t, map[string]string{"main.py": good}), "Content-Type", "application/zip"), 200, "a good archive")
}

// TestBuildListPagesWithACursor: builds list newest first, a page at a
// time, like every other list.
func TestBuildListPagesWithACursor(t *testing.T) {
	g := gateway(t)
	ten, tok := g.tenant(t, nil)
	t0 := time.Now().Add(-time.Hour).UTC()
	for i := range 5 {
		if _, err := g.db.Exec(t.Context(), `INSERT INTO builds (id, tenant, function, source_sha256, runtime, driver, state, requested_at)
			VALUES ($1, $2, 'hello', 'abc', 'python3.11', 'local', 'succeeded', $3)`, fmt.Sprintf("%s-b%d", ten, i), ten, t0.Add(time.Duration(i)*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	fb := "/v1/tenants/" + ten + "/functions/hello/builds"
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatalf("more pages than builds: %v", got)
		}
		r := g.call(t, "GET", fb+"?limit=2&cursor="+cursor, tok, nil)
		expect(t, r, 200, "page")
		page := r.json(t)
		items := page["items"].([]any)
		if len(items) > 2 {
			t.Fatalf("a page of limit 2 has %d items", len(items))
		}
		for _, it := range items {
			got = append(got, it.(map[string]any)["id"].(string))
		}
		next, _ := page["next_cursor"].(string)
		if next == "" {
			break
		}
		cursor = next
	}
	want := []string{ten + "-b4", ten + "-b3", ten + "-b2", ten + "-b1", ten + "-b0"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("builds paged as %v, want %v", got, want)
	}
	expect(t, g.call(t, "GET", fb+"?cursor=bm90LWEtY3Vyc29y", tok, nil), 400, "malformed cursor")
}

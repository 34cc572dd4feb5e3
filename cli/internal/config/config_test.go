package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSaveLoadResolve(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{"XDG_CONFIG_HOME": dir}
	getenv := func(k string) string { return env[k] }
	path, err := Path(getenv)
	if err != nil {
		t.Fatal(err)
	}
	if path != filepath.Join(dir, "sless", "config.yaml") {
		t.Fatalf("path %s ignores XDG_CONFIG_HOME", path)
	}
	f := &File{CurrentContext: "b"}
	f.Put(Context{Name: "b", URL: "http://b", Tenant: "tb", Token: "secret-b"})
	f.Put(Context{Name: "a", URL: "http://a", Tenant: "ta", Token: "secret-a"})
	if err := f.Save(path); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("config mode %v, want 0600 (it holds tokens)", st.Mode().Perm())
	}
	g, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(f, g); diff != "" {
		t.Errorf("reloaded (-saved +loaded):\n%s", diff)
	}
	tests := []struct {
		name, ctx string
		env       map[string]string
		want      Context
		fail      bool
	}{
		{"the current one", "", nil, Context{Name: "b", URL: "http://b", Tenant: "tb", Token: "secret-b"}, false},
		{"a named one", "a", nil, Context{Name: "a", URL: "http://a", Tenant: "ta", Token: "secret-a"}, false},
		{"the environment overrides", "a", map[string]string{"SLESS_URL": "http://e", "SLESS_TOKEN": "t-e", "SLESS_TENANT": "te"},
			Context{Name: "a", URL: "http://e", Tenant: "te", Token: "t-e"}, false},
		{"an unknown one", "nope", nil, Context{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := g.Resolve(tt.ctx, func(k string) string { return tt.env[k] })
			if (err != nil) != tt.fail {
				t.Fatalf("error %v, want failure %v", err, tt.fail)
			}
			if !tt.fail && got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
	if _, err := (&File{}).Resolve("", func(string) string { return "" }); err == nil {
		t.Error("no context and no SLESS_URL resolved")
	}
}

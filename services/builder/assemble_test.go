package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kube5s/sless/pkg/testenv"
)

// TestAssembleCommandPrintsTheDigest runs `builder assemble` as the build
// Job's last step does, against the real registry: it prints the digest of
// the image it pushed, and that image is in the registry.
func TestAssembleCommandPrintsTheDigest(t *testing.T) {
	reg := testenv.Registry(t)
	base, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := base.Digest()
	baseRef, err := name.NewDigest(reg + "/" + testenv.Name("base-") + "@" + d.String())
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(baseRef, base, remote.WithContext(t.Context())); err != nil {
		t.Fatal(err)
	}
	code := t.TempDir()
	if err := os.WriteFile(filepath.Join(code, "index.js"), []byte("exports.handler = async () => 'hi';\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dest := reg + "/" + testenv.Name("acme-") + "/cmd"
	var out, log bytes.Buffer
	args := []string{"--runtime", "nodejs20", "--base", baseRef.String(), "--code", code, "--deps", filepath.Join(t.TempDir(), "none"),
		"--destination", dest, "--source-sha256", strings.Repeat("ab", 32), "--tenant", "acme", "--function", "cmd"}
	if err := assemble(t.Context(), args, func(string) string { return "" }, &out, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	digest := strings.TrimSpace(out.String())
	if !strings.HasPrefix(digest, "sha256:") {
		t.Fatalf("printed %q, want the digest", out.String())
	}
	ref, err := name.NewDigest(dest + "@" + digest)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := remote.Head(ref, remote.WithContext(t.Context())); err != nil {
		t.Errorf("the printed digest is not in the registry: %v", err)
	}
}

// TestAssembleCommandNamesEveryMissingFlag: nothing runs without them.
func TestAssembleCommandNamesEveryMissingFlag(t *testing.T) {
	var out, log bytes.Buffer
	err := assemble(t.Context(), []string{"--runtime", "python3.11"}, func(string) string { return "" }, &out, &log)
	if err == nil {
		t.Fatal("assemble ran without its flags")
	}
	for _, want := range []string{"--base", "--code", "--destination", "--source-sha256", "--tenant", "--function"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not name %s: %v", want, err)
		}
	}
	if out.Len() != 0 {
		t.Errorf("printed %q", out.String())
	}
}

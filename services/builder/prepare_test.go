package main

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/pkg/testenv"
)

// TestPrepareContextCommand runs `builder prepare-context` as the build
// Job's init container does: flags for the build, SLESS_* variables for the
// object store (real MinIO).
func TestPrepareContextCommand(t *testing.T) {
	s3 := testenv.S3(t)
	env := map[string]string{"SLESS_S3_ENDPOINT": s3.Endpoint, "SLESS_S3_ACCESS_KEY": s3.AccessKey, "SLESS_S3_SECRET_KEY": s3.SecretKey, "SLESS_S3_BUCKET": s3.Bucket}
	getenv := func(k string) string { return env[k] }

	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, _ := zw.Create("main.py")
	_, _ = w.Write([]byte("def handler(event, context):\n    return 'hi'\n"))
	_ = zw.Close()
	sum := sha256.Sum256(buf.Bytes())
	sha := hex.EncodeToString(sum[:])
	key := objstore.SourceKey("acme", "fx", sha)
	store, err := objstore.New(objstore.Config{Endpoint: s3.Endpoint, AccessKey: s3.AccessKey, SecretKey: s3.SecretKey, Bucket: s3.Bucket})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Put(t.Context(), key, bytes.NewReader(buf.Bytes()), int64(buf.Len()), "application/zip"); err != nil {
		t.Fatal(err)
	}

	out := filepath.Join(t.TempDir(), "workspace")
	var log bytes.Buffer
	args := []string{"--source-key", key, "--sha256", sha, "--runtime", "python3.11", "--entrypoint", "main.handler", "--out", out}
	if err := prepareContext(t.Context(), args, getenv, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	for _, f := range []string{"code/main.py"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	if !strings.Contains(log.String(), "SHA-256 verified") {
		t.Errorf("log: %s", log.String())
	}

	// Missing flags and a broken setting are all named at once; nothing runs.
	err = prepareContext(t.Context(), []string{"--runtime", "python3.11"}, func(k string) string {
		if k == "SLESS_BUILD_MAX_ENTRIES" {
			return "many"
		}
		return env[k]
	}, &log)
	if err == nil {
		t.Fatal("prepare-context ran without its flags")
	}
	for _, want := range []string{"--source-key", "--sha256", "--entrypoint", "--out", "SLESS_BUILD_MAX_ENTRIES"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not name %s: %v", want, err)
		}
	}
}

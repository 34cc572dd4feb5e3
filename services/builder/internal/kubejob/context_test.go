package kubejob

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/kube5s/sless/pkg/archive"
	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/pkg/testenv"
	"github.com/kube5s/sless/services/builder/internal/build"
	"github.com/kube5s/sless/services/builder/internal/buildtest"
	"github.com/kube5s/sless/services/builder/internal/unpack"
)

// TestPrepareContext runs the build Job's context step against real MinIO:
// a good archive becomes code/ and nothing else; each bad request fails with
// its reason and leaves no code/ for the later steps to build from.
func TestPrepareContext(t *testing.T) {
	s3 := testenv.S3(t)
	objects, err := objstore.New(objstore.Config{Endpoint: s3.Endpoint, AccessKey: s3.AccessKey, SecretKey: s3.SecretKey, Bucket: s3.Bucket})
	if err != nil {
		t.Fatal(err)
	}
	put := func(data []byte) (key, sum string) {
		h := sha256.Sum256(data)
		sum = hex.EncodeToString(h[:])
		key = objstore.SourceKey("acme", "fx", sum)
		if err := objects.Put(t.Context(), key, bytes.NewReader(data), int64(len(data)), "application/zip"); err != nil {
			t.Fatal(err)
		}
		return key, sum
	}
	prepare := func(req ContextRequest) error {
		return PrepareContext(t.Context(), objects, 1<<20, archive.DefaultLimits, []unpack.Validator{unpack.EntrypointExists{}}, req, io.Discard)
	}

	t.Run("node", func(t *testing.T) {
		key, sum := put(buildtest.Zip(t, buildtest.Entry{Name: "index.js", Body: "exports.handler = async () => 'hi';\n"},
			buildtest.Entry{Name: "package.json", Body: `{"name":"fx","version":"1.0.0","dependencies":{"is-number":"7.0.0"}}`},
			buildtest.Entry{Name: "lib/util.js", Body: "module.exports = 1;\n"}))
		out := t.TempDir()
		if err := prepare(ContextRequest{SourceKey: key, SHA256: sum, Runtime: "nodejs20", Entrypoint: "index.handler", Out: out}); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"code/index.js", "code/package.json", "code/lib/util.js"} {
			if _, err := os.Stat(filepath.Join(out, f)); err != nil {
				t.Error(err)
			}
		}
		entries, _ := os.ReadDir(out)
		if len(entries) != 1 {
			t.Errorf("the workspace holds %d entries, want code/ alone", len(entries))
		}
		// A retried init container starts over in the same directory.
		if err := prepare(ContextRequest{SourceKey: key, SHA256: sum, Runtime: "nodejs20", Entrypoint: "index.handler", Out: out}); err != nil {
			t.Fatalf("second run in the same directory: %v", err)
		}
	})

	t.Run("python", func(t *testing.T) {
		key, sum := put(buildtest.Zip(t, buildtest.Entry{Name: "main.py", Body: "def handler(event, context):\n    return 'hi'\n"}))
		out := t.TempDir()
		if err := prepare(ContextRequest{SourceKey: key, SHA256: sum, Runtime: "python3.11", Entrypoint: "main.handler", Out: out}); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(out, "code", "main.py")); err != nil {
			t.Error(err)
		}
	})

	goodKey, goodSum := put(buildtest.Zip(t, buildtest.Entry{Name: "main.py", Body: "def handler(e, c):\n    return 1\n"}))
	slipKey, slipSum := put(buildtest.Zip(t, buildtest.Entry{Name: "main.py", Body: "x = 1\n"}, buildtest.Entry{Name: "../escape.py", Body: "x = 1\n"}))
	noEntryKey, noEntrySum := put(buildtest.Zip(t, buildtest.Entry{Name: "other.py", Body: "x = 1\n"}))
	bigKey, bigSum := put(bytes.Repeat([]byte("z"), 2<<20))
	for _, tc := range []struct {
		name   string
		req    ContextRequest
		reason string
	}{
		{"digest mismatch", ContextRequest{SourceKey: goodKey, SHA256: slipSum, Runtime: "python3.11", Entrypoint: "main.handler"}, build.ReasonSourceUnavailable},
		{"missing archive", ContextRequest{SourceKey: "sources/acme/fx/nothing.zip", SHA256: goodSum, Runtime: "python3.11", Entrypoint: "main.handler"}, build.ReasonSourceUnavailable},
		{"zip slip", ContextRequest{SourceKey: slipKey, SHA256: slipSum, Runtime: "python3.11", Entrypoint: "main.handler"}, archive.ReasonUnsafePath},
		{"no entrypoint", ContextRequest{SourceKey: noEntryKey, SHA256: noEntrySum, Runtime: "python3.11", Entrypoint: "main.handler"}, archive.ReasonMissingEntrypoint},
		{"unknown runtime", ContextRequest{SourceKey: goodKey, SHA256: goodSum, Runtime: "ruby3", Entrypoint: "main.handler"}, archive.ReasonUnsupportedRuntime},
		{"archive over the limit", ContextRequest{SourceKey: bigKey, SHA256: bigSum, Runtime: "python3.11", Entrypoint: "main.handler"}, archive.ReasonTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent := t.TempDir()
			tc.req.Out = filepath.Join(parent, "workspace")
			err := prepare(tc.req)
			var be *archive.Error
			if !errors.As(err, &be) || be.Reason != tc.reason {
				t.Fatalf("error %v, want reason %s", err, tc.reason)
			}
			if _, err := os.Stat(filepath.Join(tc.req.Out, "code")); err == nil {
				t.Error("code/ was written for a refused archive")
			}
			// Nothing outside the workspace, nothing left inside it.
			entries, _ := os.ReadDir(parent)
			for _, e := range entries {
				if e.Name() != "workspace" {
					t.Errorf("%s written outside the build context", e.Name())
				}
			}
			inside, _ := os.ReadDir(tc.req.Out)
			if len(inside) != 0 {
				t.Errorf("the refused context holds %d entries", len(inside))
			}
		})
	}
}

func TestContextFailureReadsTheTerminationMessage(t *testing.T) {
	if e := contextFailure("MissingEntrypoint: main.py not found\n"); e == nil || e.Reason != archive.ReasonMissingEntrypoint || e.Message != "main.py not found" {
		t.Errorf("got %+v", e)
	}
	if e := contextFailure("dial tcp: connection refused"); e == nil || e.Reason != build.ReasonBuildJobFailed {
		t.Errorf("an unknown message must be an internal job failure, got %+v", e)
	}
	if e := contextFailure("  "); e != nil {
		t.Errorf("no message, no error: got %+v", e)
	}
}

package localbuild_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kube5s/sless/pkg/archive"
	"github.com/kube5s/sless/services/builder/internal/build"
	"github.com/kube5s/sless/services/builder/internal/buildtest"
	"github.com/kube5s/sless/services/builder/internal/localbuild"
	"github.com/kube5s/sless/services/builder/internal/unpack"
)

func TestMain(m *testing.M) {
	os.Exit(buildtest.Main(m, nil))
}

func TestMalformedArchivesFailWithTheirOwnReason(t *testing.T) {
	py := func(entries ...buildtest.Entry) (string, string, []byte) {
		return "python3.11", "main.handler", buildtest.Zip(t, entries...)
	}
	js := func(entries ...buildtest.Entry) (string, string, []byte) {
		return "nodejs20", "index.handler", buildtest.Zip(t, entries...)
	}
	good := buildtest.Entry{Name: "main.py", Body: "def handler(e, c):\n    return 1\n"}
	tests := []struct {
		name    string
		archive func() (string, string, []byte)
		reason  string
		message string
	}{
		{"not a zip", func() (string, string, []byte) { return "python3.11", "main.handler", []byte("PK? no, a text file") }, archive.ReasonInvalidArchive, "not a zip"},
		{"empty file", func() (string, string, []byte) { return "python3.11", "main.handler", nil }, archive.ReasonInvalidArchive, "not a zip"},
		{"zip slip", func() (string, string, []byte) { return py(good, buildtest.Entry{Name: "../../escape.py", Body: "x"}) }, archive.ReasonUnsafePath, "outside the archive root"},
		{"nested zip slip", func() (string, string, []byte) {
			return py(good, buildtest.Entry{Name: "lib/../../escape.py", Body: "x"})
		}, archive.ReasonUnsafePath, "outside"},
		{"absolute path", func() (string, string, []byte) { return py(good, buildtest.Entry{Name: "/etc/cron.d/evil", Body: "x"}) }, archive.ReasonUnsafePath, "outside"},
		{"windows path", func() (string, string, []byte) { return py(good, buildtest.Entry{Name: `..\..\evil.py`, Body: "x"}) }, archive.ReasonUnsafePath, "outside"},
		{"symlink", func() (string, string, []byte) {
			return py(good, buildtest.Entry{Name: "link", Body: "/etc/passwd", Mode: fs.ModeSymlink | 0o777})
		}, archive.ReasonSymlink, "symbolic link"},
		{"device", func() (string, string, []byte) {
			return py(good, buildtest.Entry{Name: "dev", Body: "", Mode: fs.ModeDevice | 0o600})
		}, archive.ReasonUnsafePath, "not a regular file"},
		{"too many entries", func() (string, string, []byte) {
			es := []buildtest.Entry{good}
			for i := range 30 {
				es = append(es, buildtest.Entry{Name: "f" + string(rune('a'+i%26)) + strings.Repeat("x", i) + ".txt", Body: "x"})
			}
			return py(es...)
		}, archive.ReasonTooLarge, "entries"},
		{"zip bomb", func() (string, string, []byte) {
			return py(good, buildtest.Entry{Name: "zeros.bin", Body: strings.Repeat("\x00", 2<<20)})
		}, archive.ReasonTooLarge, "bytes"},
		{"duplicate entry", func() (string, string, []byte) { return py(good, good) }, archive.ReasonInvalidArchive, "appears twice"},
		{"missing python module", func() (string, string, []byte) { return py(buildtest.Entry{Name: "app.py", Body: "x = 1\n"}) }, archive.ReasonMissingEntrypoint, "main.py"},
		{"missing node file", func() (string, string, []byte) { return js(buildtest.Entry{Name: "app.js", Body: "exports.x = 1\n"}) }, archive.ReasonMissingEntrypoint, "index.js"},
		{"python syntax error", func() (string, string, []byte) {
			return py(buildtest.Entry{Name: "main.py", Body: "def handler(e, c)\n    return 1\n"})
		}, build.ReasonSyntaxError, "main.py:1"},
		{"javascript syntax error", func() (string, string, []byte) {
			return js(buildtest.Entry{Name: "index.js", Body: "exports.handler = async (e => {\n"})
		}, build.ReasonSyntaxError, "(at index.js:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			buildDir := filepath.Join(root, "build")
			if err := os.Mkdir(buildDir, 0o755); err != nil {
				t.Fatal(err)
			}
			runtime, entrypoint, data := tt.archive()
			l := &localbuild.Driver{Root: buildDir, Python: "python3", Node: "node", Npm: "npm", Limits: archive.Limits{MaxEntries: 20, MaxBytes: 1 << 20},
				Validators: []unpack.Validator{unpack.EntrypointExists{}, unpack.Syntax{Python: "python3", Node: "node"}}}
			var log bytes.Buffer
			_, err := l.Build(t.Context(), &build.Job{ID: "b-test", Runtime: runtime, Entrypoint: entrypoint,
				SourceSHA256: strings.Repeat("a", 64), Archive: data, Log: &log})
			var be *archive.Error
			if !errors.As(err, &be) {
				t.Fatalf("error = %v, want a build error with reason %s", err, tt.reason)
			}
			if be.Reason != tt.reason || !strings.Contains(be.Message, tt.message) {
				t.Errorf("got %s: %s; want %s mentioning %q", be.Reason, be.Message, tt.reason, tt.message)
			}
			// What the user reads never shows the build host's paths.
			if strings.Contains(be.Message, root) || strings.Contains(be.Message, ".tmp") {
				t.Errorf("the message shows a path of the build host: %s", be.Message)
			}
			if strings.Contains(log.String(), root) {
				t.Errorf("the build log shows a path of the build host: %s", log.String())
			}
			// Nothing outside the build directory, and no artifact inside it.
			outside, _ := os.ReadDir(root)
			if len(outside) != 1 {
				t.Errorf("files written next to the build directory: %v", outside)
			}
			if _, err := os.Stat(filepath.Join(buildDir, runtime)); err == nil {
				t.Error("a failed build left an artifact directory")
			}
		})
	}
}

package build

import (
	"archive/zip"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kube5s/sless/pkg/archive"
)

type entry struct {
	name string
	body string
	mode fs.FileMode
}

// zipOf builds an archive in memory; the malformed corpus is generated, not
// committed.
func zipOf(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		h := &zip.FileHeader{Name: e.name, Method: zip.Deflate}
		if e.mode != 0 {
			h.SetMode(e.mode)
		}
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestMalformedArchivesFailWithTheirOwnReason(t *testing.T) {
	py := func(entries ...entry) (string, string, []byte) {
		return "python3.11", "main.handler", zipOf(t, entries...)
	}
	js := func(entries ...entry) (string, string, []byte) {
		return "nodejs20", "index.handler", zipOf(t, entries...)
	}
	good := entry{name: "main.py", body: "def handler(e, c):\n    return 1\n"}
	tests := []struct {
		name    string
		archive func() (string, string, []byte)
		reason  string
		message string
	}{
		{"not a zip", func() (string, string, []byte) { return "python3.11", "main.handler", []byte("PK? no, a text file") }, archive.ReasonInvalidArchive, "not a zip"},
		{"empty file", func() (string, string, []byte) { return "python3.11", "main.handler", nil }, archive.ReasonInvalidArchive, "not a zip"},
		{"zip slip", func() (string, string, []byte) { return py(good, entry{name: "../../escape.py", body: "x"}) }, archive.ReasonUnsafePath, "outside the archive root"},
		{"nested zip slip", func() (string, string, []byte) { return py(good, entry{name: "lib/../../escape.py", body: "x"}) }, archive.ReasonUnsafePath, "outside"},
		{"absolute path", func() (string, string, []byte) { return py(good, entry{name: "/etc/cron.d/evil", body: "x"}) }, archive.ReasonUnsafePath, "outside"},
		{"windows path", func() (string, string, []byte) { return py(good, entry{name: `..\..\evil.py`, body: "x"}) }, archive.ReasonUnsafePath, "outside"},
		{"symlink", func() (string, string, []byte) {
			return py(good, entry{name: "link", body: "/etc/passwd", mode: fs.ModeSymlink | 0o777})
		}, archive.ReasonSymlink, "symbolic link"},
		{"device", func() (string, string, []byte) {
			return py(good, entry{name: "dev", body: "", mode: fs.ModeDevice | 0o600})
		}, archive.ReasonUnsafePath, "not a regular file"},
		{"too many entries", func() (string, string, []byte) {
			es := []entry{good}
			for i := range 30 {
				es = append(es, entry{name: "f" + string(rune('a'+i%26)) + strings.Repeat("x", i) + ".txt", body: "x"})
			}
			return py(es...)
		}, archive.ReasonTooLarge, "entries"},
		{"zip bomb", func() (string, string, []byte) {
			return py(good, entry{name: "zeros.bin", body: strings.Repeat("\x00", 2<<20)})
		}, archive.ReasonTooLarge, "bytes"},
		{"duplicate entry", func() (string, string, []byte) { return py(good, good) }, archive.ReasonInvalidArchive, "appears twice"},
		{"missing python module", func() (string, string, []byte) { return py(entry{name: "app.py", body: "x = 1\n"}) }, archive.ReasonMissingEntrypoint, "main.py"},
		{"missing node file", func() (string, string, []byte) { return js(entry{name: "app.js", body: "exports.x = 1\n"}) }, archive.ReasonMissingEntrypoint, "index.js"},
		{"python syntax error", func() (string, string, []byte) {
			return py(entry{name: "main.py", body: "def handler(e, c)\n    return 1\n"})
		}, ReasonSyntaxError, "main.py:1"},
		{"javascript syntax error", func() (string, string, []byte) {
			return js(entry{name: "index.js", body: "exports.handler = async (e => {\n"})
		}, ReasonSyntaxError, "(at index.js:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			buildDir := filepath.Join(root, "build")
			if err := os.Mkdir(buildDir, 0o755); err != nil {
				t.Fatal(err)
			}
			runtime, entrypoint, data := tt.archive()
			l := &Local{Root: buildDir, Python: "python3", Node: "node", Npm: "npm", Limits: Limits{MaxEntries: 20, MaxBytes: 1 << 20},
				Validators: []Validator{EntrypointExists{}, Syntax{Python: "python3", Node: "node"}}}
			var log bytes.Buffer
			_, err := l.Build(t.Context(), &Job{ID: "b-test", Runtime: runtime, Entrypoint: entrypoint,
				SourceSHA256: strings.Repeat("a", 64), Archive: data, Log: &log})
			var be *Error
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

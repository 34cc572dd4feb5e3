package archive

import (
	"archive/zip"
	"bytes"
	"errors"
	"io/fs"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

type entry struct {
	name string
	size int
	mode fs.FileMode
}

func reader(t *testing.T, entries ...entry) *zip.Reader {
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
		_, _ = w.Write([]byte(strings.Repeat("x", e.size)))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	zr, err := zip.NewReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	return zr
}

func TestCheckDirectoryJudgesTheCentralDirectory(t *testing.T) {
	lim := Limits{MaxEntries: 3, MaxBytes: 100}
	tests := []struct {
		name    string
		entries []entry
		reason  string
		files   []string
	}{
		{"fits", []entry{{name: "main.py", size: 60}, {name: "lib/", mode: fs.ModeDir | 0o755}, {name: "lib/a.py", size: 40}}, "", []string{"main.py", "lib/a.py"}},
		{"one entry too many", []entry{{name: "a", size: 1}, {name: "b", size: 1}, {name: "c", size: 1}, {name: "d", size: 1}}, ReasonTooLarge, nil},
		{"declared bytes over the limit", []entry{{name: "a", size: 60}, {name: "b", size: 41}}, ReasonTooLarge, nil},
		{"zip slip", []entry{{name: "../x", size: 1}}, ReasonUnsafePath, nil},
		{"windows zip slip", []entry{{name: `..\x`, size: 1}}, ReasonUnsafePath, nil},
		{"absolute", []entry{{name: "/etc/x", size: 1}}, ReasonUnsafePath, nil},
		{"symlink", []entry{{name: "l", size: 3, mode: fs.ModeSymlink | 0o777}}, ReasonSymlink, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files, err := CheckDirectory(reader(t, tt.entries...), lim)
			var ae *Error
			switch {
			case tt.reason == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.reason != "" && (!errors.As(err, &ae) || ae.Reason != tt.reason):
				t.Fatalf("error %v, want reason %s", err, tt.reason)
			}
			if diff := cmp.Diff(tt.files, files); diff != "" {
				t.Errorf("files (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCheckEntrypointNamesTheFilesItNeeds(t *testing.T) {
	tests := []struct {
		runtime, entrypoint string
		files               []string
		reason, mention     string
	}{
		{"python3.11", "main.handler", []string{"main.py"}, "", ""},
		{"python3.11", "pkg.mod.handler", []string{"pkg/mod/__init__.py"}, "", ""},
		{"python3.11", "main.handler", []string{"src/main.py"}, ReasonMissingEntrypoint, "main.py or main/__init__.py"},
		{"nodejs20", "index.handler", []string{"index.mjs"}, "", ""},
		{"nodejs20", "index.handler", []string{"app.js"}, ReasonMissingEntrypoint, "index.js"},
		{"nodejs20", "handler", []string{"index.js"}, ReasonMissingEntrypoint, "not <module>.<function>"},
		{"ruby3", "main.handler", []string{"main.rb"}, ReasonUnsupportedRuntime, "ruby3"},
	}
	for _, tt := range tests {
		t.Run(tt.runtime+"/"+tt.entrypoint, func(t *testing.T) {
			err := CheckEntrypoint(tt.files, tt.runtime, tt.entrypoint)
			var ae *Error
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.As(err, &ae) || ae.Reason != tt.reason || !strings.Contains(ae.Message, tt.mention) {
				t.Errorf("error %v, want %s mentioning %q", err, tt.reason, tt.mention)
			}
		})
	}
}

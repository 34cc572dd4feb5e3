package archive

import (
	"archive/zip"
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPackIsDeterministic: the same files give the same bytes whatever
// their times and the order they were written in; a changed byte changes
// the digest; skipped and excluded files are left out; entries are sorted.
func TestPackIsDeterministic(t *testing.T) {
	files := map[string]string{"main.py": "print(1)\n", "lib/util.py": "x = 1\n", "README.md": "doc", "sless.yaml": "name: x",
		".git/HEAD": "ref", "__pycache__/main.cpython-311.pyc": "junk", "data/a.txt": "a"}
	a, b := t.TempDir(), t.TempDir()
	writeFiles(t, a, files)
	writeFiles(t, b, files)
	old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	if err := os.Chtimes(filepath.Join(b, "main.py"), old, old); err != nil {
		t.Fatal(err)
	}
	pa, err := Pack(a, []string{"*.md"})
	if err != nil {
		t.Fatal(err)
	}
	pb, err := Pack(b, []string{"*.md"})
	if err != nil {
		t.Fatal(err)
	}
	if pa.SHA256 != pb.SHA256 || !bytes.Equal(pa.Bytes, pb.Bytes) {
		t.Fatalf("the same files packed differently: %s vs %s", pa.SHA256, pb.SHA256)
	}
	if diff := cmp.Diff([]string{"data/a.txt", "lib/util.py", "main.py"}, pa.Files); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
	zr, err := zip.NewReader(bytes.NewReader(pa.Bytes), int64(len(pa.Bytes)))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
		if !f.Modified.Equal(packEpoch) {
			t.Errorf("%s: modified %s, want the fixed time", f.Name, f.Modified)
		}
	}
	if diff := cmp.Diff(pa.Files, names); diff != "" {
		t.Errorf("zip entries (-want +got):\n%s", diff)
	}
	writeFiles(t, b, map[string]string{"main.py": "print(2)\n"})
	pc, err := Pack(b, []string{"*.md"})
	if err != nil {
		t.Fatal(err)
	}
	if pc.SHA256 == pa.SHA256 {
		t.Error("a changed file kept the digest")
	}
}

func TestPackRefusesSymlinks(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"main.py": "x"})
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "passwd")); err != nil {
		t.Fatal(err)
	}
	if _, err := Pack(dir, nil); err == nil {
		t.Fatal("a symbolic link was packed")
	}
}

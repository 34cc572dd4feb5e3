package archive

import (
	"archive/zip"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func writeTree(t *testing.T, dir string, files map[string]string) {
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

// The same tree written twice, at different times, with different
// permissions on its files and in a different order, zips to the same bytes.
func TestZipDirIsDeterministic(t *testing.T) {
	tree := map[string]string{"main.py": "def handler(e, c):\n    return 1\n", "lib/util.py": "X = 1\n", "lib.txt": "a", "requirements.txt": ""}
	a, b := t.TempDir(), t.TempDir()
	writeTree(t, a, tree)
	for _, name := range []string{"requirements.txt", "lib.txt", "lib/util.py", "main.py"} { // another creation order
		writeTree(t, b, map[string]string{name: tree[name]})
	}
	old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	if err := os.Chtimes(filepath.Join(b, "main.py"), old, old); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(b, "lib.txt"), 0o600); err != nil {
		t.Fatal(err)
	}
	za, sa, err := ZipDir(a)
	if err != nil {
		t.Fatal(err)
	}
	zb, sb, err := ZipDir(b)
	if err != nil {
		t.Fatal(err)
	}
	if sa != sb || !bytes.Equal(za, zb) {
		t.Fatalf("the same tree zipped to %s and %s", sa, sb)
	}

	zr, err := zip.NewReader(bytes.NewReader(za), int64(len(za)))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
		if !f.Modified.Equal(zipEpoch) {
			t.Errorf("%s carries time %s, want %s", f.Name, f.Modified, zipEpoch)
		}
		if f.Name == "main.py" {
			rc, _ := f.Open()
			body, _ := io.ReadAll(rc)
			rc.Close()
			if string(body) != tree["main.py"] {
				t.Errorf("main.py unpacks to %q", body)
			}
		}
	}
	want := []string{"lib.txt", "lib/util.py", "main.py", "requirements.txt"}
	if len(names) != len(want) {
		t.Fatalf("entries %v, want %v", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("entries %v, want %v", names, want)
		}
	}

	// One changed byte changes the digest.
	writeTree(t, b, map[string]string{"lib/util.py": "X = 2\n"})
	if _, sc, err := ZipDir(b); err != nil || sc == sa {
		t.Fatalf("a changed file kept the digest %s (err %v)", sc, err)
	}
}

func TestZipDirRefusesLinksAndEmptyTrees(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := ZipDir(dir); err == nil {
		t.Fatal("an empty directory was zipped")
	}
	writeTree(t, dir, map[string]string{"main.py": "x"})
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "passwd")); err != nil {
		t.Fatal(err)
	}
	_, _, err := ZipDir(dir)
	var ae *Error
	if !errors.As(err, &ae) || ae.Reason != ReasonSymlink {
		t.Fatalf("a tree with a link: %v, want a %s refusal", err, ReasonSymlink)
	}
	if _, _, err := ZipDir(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("a missing directory was zipped")
	}
}

package archive

import (
	"archive/zip"
	"bytes"
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
func TestPackIgnoresPermissionsAndOrder(t *testing.T) {
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
	pa, err := Pack(a, nil)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := Pack(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	za, sa, zb, sb := pa.Bytes, pa.SHA256, pb.Bytes, pb.SHA256
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
		if !f.Modified.Equal(packEpoch) {
			t.Errorf("%s carries time %s, want %s", f.Name, f.Modified, packEpoch)
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
	if pc, err := Pack(b, nil); err != nil || pc.SHA256 == sa {
		t.Fatalf("a changed file kept the digest (err %v)", err)
	}
}

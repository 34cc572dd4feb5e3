package runtimes

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestWrappersAreTheFilesOnDisk: the embedded copies are the wrappers of
// this directory.
func TestWrappersAreTheFilesOnDisk(t *testing.T) {
	for rt, name := range wrappers {
		w, err := WrapperOf(rt)
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join(rt, name))
		if err != nil {
			t.Fatal(err)
		}
		if w.Name != name || !bytes.Equal(w.Data, want) {
			t.Errorf("%s/%s: the embedded copy differs from the file", rt, name)
		}
	}
	if _, err := WrapperOf("ruby3"); err == nil {
		t.Error("an unknown runtime has a wrapper")
	}
}

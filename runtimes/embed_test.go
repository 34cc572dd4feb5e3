package runtimes

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestImageFilesAreTheFilesOnDisk: the embedded copies are the wrappers and
// Dockerfiles of this directory, and each Dockerfile copies its wrapper.
func TestImageFilesAreTheFilesOnDisk(t *testing.T) {
	for rt, name := range wrappers {
		img, err := ImageFiles(rt)
		if err != nil {
			t.Fatal(err)
		}
		for file, got := range map[string][]byte{"Dockerfile": img.Dockerfile, name: img.Wrapper} {
			want, err := os.ReadFile(filepath.Join(rt, file))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s/%s: the embedded copy differs from the file", rt, file)
			}
		}
		if !strings.Contains(string(img.Dockerfile), "COPY "+name+" ") {
			t.Errorf("%s/Dockerfile does not copy %s", rt, name)
		}
	}
	if _, err := ImageFiles("ruby3"); err == nil {
		t.Error("an unknown runtime has image files")
	}
}

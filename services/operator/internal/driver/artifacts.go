package driver

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ArtifactDirs removes local artifact directories (the builder's local
// driver writes them below Root, SLESS_ARTIFACT_DIR) once no version runs
// one. A directory outside Root is never removed.
type ArtifactDirs struct {
	Root string
}

// Remove deletes dir, which must be below Root.
func (a ArtifactDirs) Remove(dir string) error {
	root, err := filepath.Abs(a.Root)
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(root, abs)
	if a.Root == "" || err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return fmt.Errorf("artifact %s is not below the artifact directory %s", dir, a.Root)
	}
	if err := os.RemoveAll(abs); err != nil {
		return fmt.Errorf("remove artifact %s: %w", dir, err)
	}
	return nil
}

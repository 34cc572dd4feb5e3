package archive

// Pack packs a function directory into a zip that depends only on the
// files' paths, contents and executable bits: entries sorted by path,
// fixed times, no owners, so the same directory always has the same digest
// and an unchanged function is not uploaded again. The CLI (deploy) and the
// Terraform provider (source_dir) share it, so that both compute the same
// digest for the same tree.

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// packEpoch is every entry's modification time (the zip format's first day).
var packEpoch = time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)

// Always left out: the CLI's own file, version control, editors' and
// runtimes' caches.
var packSkipped = []string{"sless.yaml", ".git", ".hg", ".svn", ".sless", "__pycache__", "node_modules/.cache", ".DS_Store", ".venv"}

// Packed is a packed directory.
type Packed struct {
	Bytes  []byte
	SHA256 string
	Files  []string
}

// Pack zips dir, leaving out the skipped names and the paths matching one
// of exclude (path.Match patterns, against the slash path from dir or its
// base name). Symbolic links are refused: they could point outside dir.
func Pack(dir string, exclude []string) (*Packed, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		rel = filepath.ToSlash(rel)
		if packLeft(rel, exclude) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			return fmt.Errorf("%s is a symbolic link: copy the file in instead", rel)
		case d.IsDir():
			return nil
		case !d.Type().IsRegular():
			return fmt.Errorf("%s is not a regular file", rel)
		}
		files = append(files, rel)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pack %s: %w", dir, err)
	}
	sort.Strings(files)
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, rel := range files {
		full := filepath.Join(dir, filepath.FromSlash(rel))
		info, err := os.Stat(full)
		if err != nil {
			return nil, fmt.Errorf("pack %s: %w", dir, err)
		}
		mode := fs.FileMode(0o644)
		if info.Mode()&0o111 != 0 {
			mode = 0o755
		}
		h := &zip.FileHeader{Name: rel, Method: zip.Deflate, Modified: packEpoch}
		h.SetMode(mode)
		w, err := zw.CreateHeader(h)
		if err != nil {
			return nil, err
		}
		b, err := os.ReadFile(full)
		if err != nil {
			return nil, fmt.Errorf("pack %s: %w", dir, err)
		}
		if _, err := w.Write(b); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(buf.Bytes())
	return &Packed{Bytes: buf.Bytes(), SHA256: hex.EncodeToString(sum[:]), Files: files}, nil
}

func packLeft(rel string, exclude []string) bool {
	base := path.Base(rel)
	for _, s := range packSkipped {
		if rel == s || base == s && !strings.Contains(s, "/") {
			return true
		}
	}
	for _, pat := range exclude {
		if ok, _ := path.Match(pat, rel); ok {
			return true
		}
		if ok, _ := path.Match(pat, base); ok {
			return true
		}
	}
	return false
}

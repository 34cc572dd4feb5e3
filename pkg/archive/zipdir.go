package archive

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// zipEpoch is the time every entry of a deterministic zip carries: the
// earliest a zip's DOS timestamp can say, so that no clock or checkout
// time leaks into the bytes.
var zipEpoch = time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)

// ZipDir packs the regular files under dir into a zip whose bytes depend
// only on the files' relative paths and contents: entries sorted by path,
// one fixed time, mode 0644 (0755 when the owner may execute), no
// directory entries, no extra fields. The same tree gives the same bytes
// (and SHA-256) on every machine, so a client can tell from the digest
// alone whether the code changed. Symbolic links and other non-regular
// files are refused, as the platform refuses them in archives; dir itself
// may be a link. It returns the archive and its hex SHA-256.
func ZipDir(dir string) ([]byte, string, error) {
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, "", fmt.Errorf("zip %s: %w", dir, err)
	}
	if st, err := os.Stat(root); err != nil {
		return nil, "", fmt.Errorf("zip %s: %w", dir, err)
	} else if !st.IsDir() {
		return nil, "", fmt.Errorf("zip %s: not a directory", dir)
	}
	type entry struct {
		name string
		path string
		mode fs.FileMode
	}
	var files []entry
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		if !d.Type().IsRegular() {
			return refuse(ReasonSymlink, "%s is not a regular file (links and devices cannot be deployed)", name)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		files = append(files, entry{name: name, path: p, mode: info.Mode()})
		return nil
	})
	if err != nil {
		return nil, "", fmt.Errorf("zip %s: %w", dir, err)
	}
	if len(files) == 0 {
		return nil, "", fmt.Errorf("zip %s: the directory has no files", dir)
	}
	// WalkDir is lexical per directory; sort the whole list by its
	// slash-separated name so that "a/b" and "a.b" order the same way
	// everywhere.
	sort.Slice(files, func(i, j int) bool { return files[i].name < files[j].name })

	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	zw.RegisterCompressor(zip.Deflate, func(w io.Writer) (io.WriteCloser, error) {
		return flate.NewWriter(w, flate.DefaultCompression)
	})
	for _, f := range files {
		mode := fs.FileMode(0o644)
		if f.mode&0o100 != 0 {
			mode = 0o755
		}
		h := &zip.FileHeader{Name: f.name, Method: zip.Deflate, Modified: zipEpoch}
		h.SetMode(mode)
		w, err := zw.CreateHeader(h)
		if err != nil {
			return nil, "", fmt.Errorf("zip %s: %w", dir, err)
		}
		if err := copyFile(w, f.path); err != nil {
			return nil, "", fmt.Errorf("zip %s: %w", dir, err)
		}
	}
	if err := zw.Close(); err != nil {
		return nil, "", fmt.Errorf("zip %s: %w", dir, err)
	}
	sum := sha256.Sum256(buf.Bytes())
	return buf.Bytes(), hex.EncodeToString(sum[:]), nil
}

func copyFile(w io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

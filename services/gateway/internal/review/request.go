package review

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"unicode/utf8"

	"github.com/kube5s/sless/pkg/archive"
)

// MaxFiles bounds the file list of a Request; the rest are counted in
// FilesOmitted.
const MaxFiles = 1000

// Request is what a reviewer is sent about one upload: the function's
// tenant, name, runtime and entrypoint, the archive's digest and size,
// its files with sizes and digests, and the text of the text files (valid
// UTF-8 without NUL) up to a budget of bytes, entrypoint and dependency
// manifests first. Nothing else: no env, no secret references, no other
// object of the tenant or of anyone else.
type Request struct {
	Tenant       string `json:"tenant"`
	Function     string `json:"function"`
	Runtime      string `json:"runtime"`
	Entrypoint   string `json:"entrypoint"`
	SourceSHA256 string `json:"source_sha256"`
	SourceBytes  int64  `json:"source_bytes"`
	Files        []File `json:"files"`
	FilesOmitted int    `json:"files_omitted,omitempty"` // files beyond MaxFiles, not listed
	TextBytes    int    `json:"text_bytes"`              // bytes of text sent, at most the budget
}

// File is one regular file of the archive.
type File struct {
	Name      string `json:"name"`
	Size      int64  `json:"size"`
	SHA256    string `json:"sha256"`
	Text      string `json:"text,omitempty"`
	Truncated bool   `json:"truncated,omitempty"` // text is a prefix: the budget ended in this file
	Binary    bool   `json:"binary,omitempty"`    // not text: only name, size and digest are sent
}

// Meta is what the upload knows besides the bytes.
type Meta struct {
	Tenant, Function, Runtime, Entrypoint string
	SourceSHA256                          string
}

// NewRequest reads the archive (already checked by archive.CheckDirectory
// against lim) into a Request whose texts hold at most textBudget bytes.
func NewRequest(m Meta, zipped []byte, lim archive.Limits, textBudget int) (*Request, error) {
	zr, err := zip.NewReader(bytes.NewReader(zipped), int64(len(zipped)))
	if err != nil {
		return nil, fmt.Errorf("read archive: %w", err)
	}
	req := &Request{Tenant: m.Tenant, Function: m.Function, Runtime: m.Runtime, Entrypoint: m.Entrypoint,
		SourceSHA256: m.SourceSHA256, SourceBytes: int64(len(zipped)), Files: []File{}}
	type entry struct {
		f    *zip.File
		name string
	}
	var entries []entry
	for _, f := range zr.File {
		if !f.Mode().IsRegular() || f.Mode()&fs.ModeSymlink != 0 {
			continue
		}
		name, err := archive.CleanName(f.Name)
		if err != nil {
			return nil, err
		}
		entries = append(entries, entry{f, name})
	}
	first, _ := archive.EntrypointFiles(m.Runtime, m.Entrypoint)
	first = append(first, "requirements.txt", "package.json")
	rank := func(name string) int {
		if i := slices.Index(first, name); i >= 0 {
			return i
		}
		return len(first)
	}
	slices.SortStableFunc(entries, func(a, b entry) int {
		if ra, rb := rank(a.name), rank(b.name); ra != rb {
			return ra - rb
		}
		if a.name < b.name {
			return -1
		}
		if a.name > b.name {
			return 1
		}
		return 0
	})
	budget := textBudget
	for _, e := range entries {
		if len(req.Files) == MaxFiles {
			req.FilesOmitted++
			continue
		}
		file, err := readFile(e.f, e.name, lim.MaxBytes, &budget)
		if err != nil {
			return nil, err
		}
		req.TextBytes += len(file.Text)
		req.Files = append(req.Files, file)
	}
	return req, nil
}

// readFile digests one entry and keeps its text while budget lasts.
func readFile(f *zip.File, name string, maxBytes int64, budget *int) (File, error) {
	rc, err := f.Open()
	if err != nil {
		return File{}, fmt.Errorf("read %s: %w", name, err)
	}
	defer rc.Close()
	h := sha256.New()
	keep := min(max(*budget, 0), int(min(f.UncompressedSize64, uint64(maxBytes))))
	head := make([]byte, keep)
	n, err := io.ReadFull(rc, head)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return File{}, fmt.Errorf("read %s: %w", name, err)
	}
	head = head[:n]
	h.Write(head)
	rest, err := io.Copy(h, io.LimitReader(rc, maxBytes))
	if err != nil {
		return File{}, fmt.Errorf("read %s: %w", name, err)
	}
	out := File{Name: name, Size: int64(n) + rest, SHA256: hex.EncodeToString(h.Sum(nil))}
	switch {
	case bytes.IndexByte(head, 0) >= 0 || !utf8.Valid(trimPartialRune(head, rest > 0)):
		out.Binary = true
	case rest > 0:
		out.Text, out.Truncated = string(trimPartialRune(head, true)), true
		*budget = 0 // the budget ended in this file
	default:
		out.Text = string(head)
		*budget -= n
	}
	return out, nil
}

// trimPartialRune drops a rune cut at the end of a prefix.
func trimPartialRune(b []byte, cut bool) []byte {
	if !cut {
		return b
	}
	for i := 0; i < utf8.UTFMax && len(b) > 0; i++ {
		if r, size := utf8.DecodeLastRune(b); r != utf8.RuneError || size > 1 {
			return b
		}
		b = b[:len(b)-1]
	}
	return b
}

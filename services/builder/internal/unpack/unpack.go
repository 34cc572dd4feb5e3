// Package unpack turns a source archive into checked code on disk: it
// writes the zip below a directory by pkg/archive's rules, counting the
// bytes it writes, and runs the Validators that judge the code before
// anything of it runs.
package unpack

import (
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/archive"
	"github.com/kube5s/sless/services/builder/internal/build"
)

// Source is an unpacked, checked archive.
type Source struct {
	Dir        string
	Runtime    string
	Entrypoint string
	Files      []string // relative, slash-separated
}

// Archive checks the zip in data and writes it below dir. The rules the
// central directory can be judged by are archive.CheckDirectory's (the
// gateway's at upload); Archive also refuses anything but files and
// directories and stops at lim.MaxBytes by counting the bytes it actually
// writes (headers can lie). Nothing is written outside dir. It returns the
// files, relative and slash-separated.
func Archive(data []byte, dir string, lim archive.Limits) ([]string, error) {
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return nil, build.Fail(archive.ReasonInvalidArchive, "not a zip archive: %v", err)
	}
	if _, err := archive.CheckDirectory(zr, lim); err != nil {
		return nil, err
	}
	var files []string
	var written int64
	for _, f := range zr.File {
		clean, err := archive.CleanName(f.Name)
		if err != nil {
			return nil, err
		}
		switch mode := f.Mode(); {
		case mode.IsDir():
			if err := os.MkdirAll(filepath.Join(dir, filepath.FromSlash(clean)), 0o755); err != nil {
				return nil, err
			}
			continue
		case !mode.IsRegular():
			return nil, build.Fail(archive.ReasonUnsafePath, "entry %q is not a regular file (%s)", f.Name, mode.Type())
		}
		target := filepath.Join(dir, filepath.FromSlash(clean))
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return nil, err
		}
		n, err := extract(f, target, lim.MaxBytes-written)
		written += n
		if err != nil {
			return nil, err
		}
		if written > lim.MaxBytes {
			return nil, build.Fail(archive.ReasonTooLarge, "the archive unpacks to more than %d bytes (the limit)", lim.MaxBytes)
		}
		files = append(files, clean)
	}
	return files, nil
}

// extract writes f to target, at most budget+1 bytes: one more than the
// budget tells the caller the limit was passed.
func extract(f *zip.File, target string, budget int64) (int64, error) {
	rc, err := f.Open()
	if err != nil {
		return 0, build.Fail(archive.ReasonInvalidArchive, "entry %q cannot be read: %v", f.Name, err)
	}
	defer rc.Close()
	out, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return 0, build.Fail(archive.ReasonInvalidArchive, "entry %q appears twice", f.Name)
		}
		return 0, err
	}
	defer out.Close()
	n, err := io.Copy(out, io.LimitReader(rc, budget+1))
	if err != nil {
		return n, build.Fail(archive.ReasonInvalidArchive, "entry %q is corrupt: %v", f.Name, err)
	}
	return n, nil
}

// Validator checks an unpacked source before anything of it runs. More
// checks (an external code review, a licence scan) plug in here.
type Validator interface {
	Name() string
	Validate(ctx context.Context, src *Source) error
}

// EntrypointExists checks that the entrypoint's module or file is there.
type EntrypointExists struct{}

// Name implements Validator.
func (EntrypointExists) Name() string { return "entrypoint" }

// Validate implements Validator. The rule is the gateway's too (it refuses
// such an archive at upload); it is checked again for sources that did
// not come through the gateway, and after an entrypoint changed.
func (EntrypointExists) Validate(_ context.Context, src *Source) error {
	return archive.CheckEntrypoint(src.Files, src.Runtime, src.Entrypoint)
}

// Syntax compiles Python files and runs `node --check` on JavaScript, so a
// typo fails the build with its file and line instead of the first invocation.
type Syntax struct {
	Python string
	Node   string
}

// Name implements Validator.
func (Syntax) Name() string { return "syntax" }

const pyCompile = `
import sys
for f in sys.argv[1:]:
    try:
        with open(f, "rb") as fh:
            compile(fh.read(), f, "exec")
    except SyntaxError as e:
        print(f"{e.filename}:{e.lineno}: {e.msg}")
        sys.exit(1)
`

// Validate implements Validator.
func (s Syntax) Validate(ctx context.Context, src *Source) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var py, js []string
	for _, f := range src.Files {
		if strings.HasPrefix(f, "node_modules/") || strings.Contains(f, "/node_modules/") {
			continue
		}
		switch path.Ext(f) {
		case ".py":
			py = append(py, f)
		case ".js", ".mjs", ".cjs":
			js = append(js, f)
		}
	}
	if src.Runtime == string(slessv1.RuntimePython311) && len(py) > 0 {
		c := exec.CommandContext(ctx, s.Python, append([]string{"-c", pyCompile}, py...)...)
		c.Dir = src.Dir
		if out, err := c.CombinedOutput(); err != nil {
			return build.Fail(build.ReasonSyntaxError, "%s", firstLine(out, err))
		}
	}
	if src.Runtime == string(slessv1.RuntimeNodeJS20) {
		for _, f := range js {
			c := exec.CommandContext(ctx, s.Node, "--check", f)
			c.Dir = src.Dir
			if out, err := c.CombinedOutput(); err != nil {
				return build.Fail(build.ReasonSyntaxError, "%s: %s", f, nodeError(out, err))
			}
		}
	}
	return nil
}

func firstLine(out []byte, err error) string {
	s := strings.TrimSpace(string(out))
	if s == "" {
		return err.Error()
	}
	return strings.SplitN(s, "\n", 2)[0]
}

// nodeError picks the "SyntaxError: ..." line and the source line above it.
func nodeError(out []byte, err error) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for i, l := range lines {
		if strings.Contains(l, "Error:") {
			if i > 0 && strings.Contains(lines[0], ":") {
				return strings.TrimSpace(l) + " (at " + strings.TrimSpace(lines[0]) + ")"
			}
			return strings.TrimSpace(l)
		}
	}
	return firstLine(out, err)
}

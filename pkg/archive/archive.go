// Package archive owns the rules a function's source archive must meet
// that can be judged from the zip's central directory alone: how many
// entries and how many unpacked bytes it may declare, safe paths, no
// links, and the file its entrypoint needs. The gateway applies them at
// upload, so a bad archive is refused at once; the builder applies them
// again while unpacking, counting the bytes it really writes (a central
// directory can lie about sizes).
package archive

import (
	"archive/zip"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"strings"

	"github.com/kube5s/sless/pkg/client"
)

// Limits bound what an archive may unpack to.
type Limits struct {
	MaxEntries int
	MaxBytes   int64
}

// DefaultLimits are generous for functions and small for zip bombs.
var DefaultLimits = Limits{MaxEntries: 10000, MaxBytes: 256 << 20}

// Reasons an archive is refused, as the builder reports them in
// build.completed.v1.
const (
	ReasonInvalidArchive     = "InvalidArchive" // not a zip, or an entry that cannot be read
	ReasonUnsafePath         = "UnsafePath"
	ReasonSymlink            = "SymlinkNotAllowed"
	ReasonTooLarge           = "ArchiveTooLarge"
	ReasonMissingEntrypoint  = "MissingEntrypoint"
	ReasonUnsupportedRuntime = "UnsupportedRuntime"
)

// Error is a refused archive: a reason and a message that names what to
// fix. The builder reports its other user-fixable failures in it too.
type Error struct {
	Reason  string
	Message string
}

func (e *Error) Error() string { return e.Reason + ": " + e.Message }

func refuse(reason, format string, args ...any) *Error {
	return &Error{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// CleanName is an entry's slash-separated path inside the archive, or an
// error when it would leave the archive root.
func CleanName(name string) (string, error) {
	n := strings.ReplaceAll(name, "\\", "/")
	clean := path.Clean(n)
	if path.IsAbs(n) || clean == ".." || strings.HasPrefix(clean, "../") || filepath.VolumeName(name) != "" {
		return "", refuse(ReasonUnsafePath, "entry %q points outside the archive root", name)
	}
	return clean, nil
}

// CheckDirectory judges an archive by its central directory: the number
// of entries and the unpacked size it declares against lim, every path
// inside the root, no symbolic links. It returns the regular files' clean
// names.
func CheckDirectory(zr *zip.Reader, lim Limits) ([]string, error) {
	if len(zr.File) > lim.MaxEntries {
		return nil, refuse(ReasonTooLarge, "the archive has %d entries; the limit is %d", len(zr.File), lim.MaxEntries)
	}
	var declared uint64
	files := make([]string, 0, len(zr.File))
	for _, f := range zr.File {
		clean, err := CleanName(f.Name)
		if err != nil {
			return nil, err
		}
		mode := f.Mode()
		if mode&fs.ModeSymlink != 0 {
			return nil, refuse(ReasonSymlink, "entry %q is a symbolic link; archive the file itself", f.Name)
		}
		if !mode.IsRegular() {
			continue
		}
		declared += f.UncompressedSize64
		if declared > uint64(lim.MaxBytes) {
			return nil, refuse(ReasonTooLarge, "the archive declares more than %d unpacked bytes (the limit) by entry %q", lim.MaxBytes, f.Name)
		}
		files = append(files, clean)
	}
	return files, nil
}

// EntrypointFiles are the files one of which must exist for entrypoint
// (module.function in Python, file.export in Node) to load.
func EntrypointFiles(runtime, entrypoint string) ([]string, error) {
	dot := strings.LastIndex(entrypoint, ".")
	if dot <= 0 || dot == len(entrypoint)-1 {
		return nil, refuse(ReasonMissingEntrypoint, "entrypoint %q is not <module>.<function>", entrypoint)
	}
	mod := entrypoint[:dot]
	switch runtime {
	case string(client.FunctionInputRuntimePython311):
		p := strings.ReplaceAll(mod, ".", "/")
		return []string{p + ".py", p + "/__init__.py"}, nil
	case string(client.FunctionInputRuntimeNodejs20):
		return []string{mod, mod + ".js", mod + ".mjs", mod + ".cjs", mod + "/index.js"}, nil
	}
	return nil, refuse(ReasonUnsupportedRuntime, "runtime %q is not supported", runtime)
}

// CheckEntrypoint reports whether files (clean names) hold what
// entrypoint needs.
func CheckEntrypoint(files []string, runtime, entrypoint string) error {
	candidates, err := EntrypointFiles(runtime, entrypoint)
	if err != nil {
		return err
	}
	for _, f := range files {
		for _, c := range candidates {
			if f == c {
				return nil
			}
		}
	}
	return refuse(ReasonMissingEntrypoint, "entrypoint %q needs %s in the archive root", entrypoint, strings.Join(candidates, " or "))
}

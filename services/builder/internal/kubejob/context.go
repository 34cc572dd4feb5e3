package kubejob

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/kube5s/sless/pkg/archive"
	"github.com/kube5s/sless/runtimes"
	"github.com/kube5s/sless/services/builder/internal/build"
	"github.com/kube5s/sless/services/builder/internal/store"
	"github.com/kube5s/sless/services/builder/internal/unpack"
)

// ContextRequest is one `builder prepare-context` run: the init container of
// a build Job turns the source archive into the checked code that the deps
// and assemble steps read.
type ContextRequest struct {
	SourceKey  string // sources/<tenant>/<function>/<sha256>.zip
	SHA256     string // the digest the archive must have
	Runtime    string
	Entrypoint string
	Out        string // the Job's workspace; the code goes to Out/code
}

// PrepareContext fetches the archive, checks that it is the one requested
// (its SHA-256), unpacks and checks it as the local driver does, and writes
// the function's code into req.Out/code. The directory is renamed into
// place last: on any failure there is none, so the later steps cannot build
// from half-written code.
func PrepareContext(ctx context.Context, objs store.Sources, maxArchive int64, lim archive.Limits, validators []unpack.Validator, req ContextRequest, log io.Writer) error {
	if _, err := runtimes.WrapperOf(req.Runtime); err != nil {
		return build.Fail(archive.ReasonUnsupportedRuntime, "%v", err)
	}
	data, err := store.FetchSource(ctx, objs, req.SourceKey, req.SHA256, maxArchive)
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "fetched %s (%d bytes, SHA-256 verified)\n", req.SourceKey, len(data))
	if err := os.MkdirAll(req.Out, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(req.Out, ".code-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp) // a no-op after the rename
	files, err := unpack.Archive(data, tmp, lim)
	if err != nil {
		return err
	}
	src := &unpack.Source{Dir: tmp, Runtime: req.Runtime, Entrypoint: req.Entrypoint, Files: files}
	for _, v := range validators {
		fmt.Fprintf(log, "check: %s\n", v.Name())
		if err := v.Validate(ctx, src); err != nil {
			return err
		}
	}
	code := filepath.Join(req.Out, "code")
	if err := os.RemoveAll(code); err != nil { // a retried init container starts over
		return err
	}
	if err := os.Rename(tmp, code); err != nil {
		return err
	}
	fmt.Fprintf(log, "code ready in %s: %d files of a %s function\n", code, len(files), req.Runtime)
	return nil
}

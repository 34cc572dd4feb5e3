package build

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/kube5s/sless/pkg/archive"
	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/runtimes"
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
func PrepareContext(ctx context.Context, objs Sources, maxArchive int64, lim Limits, validators []Validator, req ContextRequest, log io.Writer) error {
	if _, err := runtimes.WrapperOf(req.Runtime); err != nil {
		return fail(archive.ReasonUnsupportedRuntime, "%v", err)
	}
	data, err := fetchVerified(ctx, objs, req.SourceKey, req.SHA256, maxArchive)
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
	files, err := Unpack(data, tmp, lim)
	if err != nil {
		return err
	}
	src := &Source{Dir: tmp, Runtime: req.Runtime, Entrypoint: req.Entrypoint, Files: files}
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

// fetchArchive reads a source archive of at most max bytes.
func fetchArchive(ctx context.Context, objs Sources, key string, max int64) ([]byte, error) {
	rc, size, err := objs.Get(ctx, key)
	if errors.Is(err, objstore.ErrNotFound) {
		return nil, fail(ReasonSourceUnavailable, "source archive %s is not in the object store; upload it again", key)
	}
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	if size > max {
		return nil, fail(archive.ReasonTooLarge, "the archive is %d bytes, the limit is %d", size, max)
	}
	data, err := io.ReadAll(io.LimitReader(rc, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fail(archive.ReasonTooLarge, "the archive is over the limit of %d bytes", max)
	}
	return data, nil
}

// fetchVerified fetches the archive and refuses it unless it has the
// requested SHA-256.
func fetchVerified(ctx context.Context, objs Sources, key, want string, max int64) ([]byte, error) {
	data, err := fetchArchive(ctx, objs, key, max)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); got != want {
		return nil, fail(ReasonSourceUnavailable, "the archive at %s has SHA-256 %s, not the requested %s; upload it again", key, got, want)
	}
	return data, nil
}

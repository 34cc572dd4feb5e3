package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/kube5s/sless/pkg/envconf"
	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/services/builder/internal/kubejob"
	"github.com/kube5s/sless/services/builder/internal/unpack"
)

// prepareContext is `builder prepare-context`, the init container of a
// build Job (kubernetes profile): it writes the checked code of the source
// archive in S3 into the workspace. The object store settings and archive
// limits come from the same SLESS_* variables as the service's.
func prepareContext(ctx context.Context, args []string, getenv func(string) string, out io.Writer) error {
	fs := flag.NewFlagSet("prepare-context", flag.ContinueOnError)
	fs.SetOutput(out)
	var req kubejob.ContextRequest
	fs.StringVar(&req.SourceKey, "source-key", "", "object key of the source archive")
	fs.StringVar(&req.SHA256, "sha256", "", "SHA-256 the archive must have")
	fs.StringVar(&req.Runtime, "runtime", "", "python3.11 or nodejs20")
	fs.StringVar(&req.Entrypoint, "entrypoint", "", "module.function")
	fs.StringVar(&req.Out, "out", "", "the build context directory to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var missing []error
	for name, v := range map[string]string{"--source-key": req.SourceKey, "--sha256": req.SHA256, "--runtime": req.Runtime, "--entrypoint": req.Entrypoint, "--out": req.Out} {
		if v == "" {
			missing = append(missing, fmt.Errorf("%s is required", name))
		}
	}
	if fs.NArg() > 0 {
		missing = append(missing, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	r := envconf.New(getenv)
	s3 := objstore.ReadConfig(r)
	maxArchive, lim := archiveLimits(r)
	if err := errors.Join(append(missing, r.Err())...); err != nil {
		return fmt.Errorf("prepare-context: %w", err)
	}
	store, err := objstore.New(s3)
	if err != nil {
		return err
	}
	// Syntax checks need python3 and node, which the builder's image does
	// not have; the builder ran no checks for this driver, so at least the
	// entrypoint is checked here.
	return kubejob.PrepareContext(ctx, store, maxArchive, lim, []unpack.Validator{unpack.EntrypointExists{}}, req, out)
}

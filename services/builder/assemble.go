package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/kube5s/sless/services/builder/internal/fnimage"
)

// assemble is `builder assemble`, the last step of a build Job (kubernetes
// profile), the only one that mounts the registry credentials: it appends
// the wrapper, the deps step's output and the checked code to the runtime
// base image, pushes the image and prints its digest (which main also
// writes to the termination message, where the builder reads it).
func assemble(ctx context.Context, args []string, getenv func(string) string, out, log io.Writer) error {
	fs := flag.NewFlagSet("assemble", flag.ContinueOnError)
	fs.SetOutput(log)
	var req fnimage.Request
	fs.StringVar(&req.Runtime, "runtime", "", "python3.11 or nodejs20")
	fs.StringVar(&req.Base, "base", "", "the runtime base image, name@sha256:...")
	fs.StringVar(&req.Code, "code", "", "the checked code directory (prepare-context's code/)")
	fs.StringVar(&req.Deps, "deps", "", "the deps step's output directory (optional)")
	fs.StringVar(&req.Destination, "destination", "", "the repository to push to: <registry>/<tenant>/<function>")
	fs.StringVar(&req.Tag, "tag", "", "a tag pushed besides the digest (optional)")
	fs.StringVar(&req.SourceSHA256, "source-sha256", "", "SHA-256 of the source archive, for the image's labels")
	fs.StringVar(&req.Tenant, "tenant", "", "the tenant, for the image's labels")
	fs.StringVar(&req.Function, "function", "", "the function, for the image's labels")
	fs.BoolVar(&req.Insecure, "insecure", false, "plain HTTP to a registry that is not on loopback")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var missing []error
	for _, f := range []struct{ name, v string }{{"--runtime", req.Runtime}, {"--base", req.Base}, {"--code", req.Code},
		{"--destination", req.Destination}, {"--source-sha256", req.SourceSHA256}, {"--tenant", req.Tenant}, {"--function", req.Function}} {
		if f.v == "" {
			missing = append(missing, fmt.Errorf("%s is required", f.name))
		}
	}
	if fs.NArg() > 0 {
		missing = append(missing, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if err := errors.Join(missing...); err != nil {
		return fmt.Errorf("assemble: %w", err)
	}
	req.TempDir = getenv("TMPDIR")
	digest, err := fnimage.Assemble(ctx, req, log)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(out, digest)
	return err
}

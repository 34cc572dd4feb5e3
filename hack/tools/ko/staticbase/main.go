// Command staticbase pushes the base image of the platform's images (what
// ko puts the static Go binaries on): no shell, no package manager, a
// non-root user, CA certificates and a /tmp. It is made here because no
// image can be pulled from outside this machine, and it is reproducible (the
// same CA bundle gives the same digest). It prints the image by digest.
//
//	go run ./staticbase -repo 127.0.0.1:5001/sless/static
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// nonroot is the user the platform's processes run as (distroless's).
const nonroot = 65532

var epoch = time.Unix(315532800, 0).UTC()

func main() {
	repo := flag.String("repo", "", "repository to push to, e.g. 127.0.0.1:5001/sless/static")
	certs := flag.String("ca-certificates", "/etc/ssl/certs/ca-certificates.crt", "CA bundle to include")
	flag.Parse()
	if err := run(*repo, *certs, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "staticbase:", err)
		os.Exit(1)
	}
}

func run(repo, certs string, out io.Writer) error {
	if repo == "" {
		return errors.New("-repo is required")
	}
	ca, err := os.ReadFile(certs)
	if err != nil {
		return fmt.Errorf("the CA bundle (install ca-certificates): %w", err)
	}
	type entry struct {
		name string
		mode fs.FileMode
		uid  int
		data []byte // nil: a directory
	}
	entries := []entry{
		{"etc/", 0o755, 0, nil},
		{"etc/group", 0o644, 0, []byte(fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", nonroot))},
		{"etc/passwd", 0o644, 0, []byte(fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", nonroot, nonroot))},
		{"etc/ssl/", 0o755, 0, nil},
		{"etc/ssl/certs/", 0o755, 0, nil},
		{"etc/ssl/certs/ca-certificates.crt", 0o644, 0, ca},
		{"home/", 0o755, 0, nil},
		{"home/nonroot/", 0o700, nonroot, nil},
		{"tmp/", 0o1777 | fs.ModeSticky, 0, nil},
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: int64(e.mode.Perm()), Uid: e.uid, Gid: e.uid, ModTime: epoch, Typeflag: tar.TypeDir}
		if e.mode&fs.ModeSticky != 0 {
			h.Mode |= 0o1000
		}
		if e.data != nil {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(e.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return err
	}
	img := mutate.MediaType(mutate.ConfigMediaType(empty.Image, types.OCIConfigJSON), types.OCIManifestSchema1)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, MediaType: types.OCILayer,
		History: v1.History{CreatedBy: "sless staticbase", Created: v1.Time{Time: epoch}}})
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg := cf.Config
	cfg.User = fmt.Sprintf("%d:%d", nonroot, nonroot)
	cfg.WorkingDir = "/home/nonroot"
	cfg.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"}
	if img, err = mutate.Config(img, cfg); err != nil {
		return err
	}
	cf, err = img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS, cf.Created = runtime.GOARCH, "linux", v1.Time{Time: epoch}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	r, err := name.NewRepository(repo)
	if err != nil {
		return err
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	ref := r.Digest(d.String())
	if err := remote.Write(ref, img, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	_, err = fmt.Fprintln(out, ref)
	return err
}

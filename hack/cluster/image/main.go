// Command image assembles a single-layer image from local files with
// go-containerregistry, for the local cluster (no image can be pulled here):
//
//	image -ref registry.k8s.io/pause:3.10.2 -tar pause.tar -entrypoint /pause /pause=bin/pause
//	image -ref 127.0.0.1:5001/web -push -entrypoint /web /web=bin/web
//
// Each argument is DEST=SRC: the file SRC is put at DEST in the layer
// (mode 0755, owned by root). -tar writes a docker-archive tarball that
// `ctr images import` reads; -push writes the image to its registry (plain
// HTTP for loopback registries) and prints REF@DIGEST.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func main() {
	ref := flag.String("ref", "", "image reference (required)")
	tarPath := flag.String("tar", "", "write a docker-archive tarball here")
	push := flag.Bool("push", false, "push to the reference's registry and print REF@DIGEST")
	entrypoint := flag.String("entrypoint", "", "entrypoint, words separated by spaces")
	user := flag.String("user", "", "the image's user (e.g. 65532)")
	flag.Parse()
	if err := run(*ref, *tarPath, *push, *entrypoint, *user, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(ref, tarPath string, push bool, entrypoint, user string, files []string) error {
	if ref == "" || (tarPath == "" && !push) || len(files) == 0 {
		return errors.New("usage: image -ref REF (-tar FILE | -push) [-entrypoint CMD] [-user UID] DEST=SRC (repeated)")
	}
	img, err := Build(files, strings.Fields(entrypoint), user)
	if err != nil {
		return err
	}
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		return err
	}
	if tarPath != "" {
		if err := tarball.WriteToFile(tarPath, r, img); err != nil {
			return fmt.Errorf("writing %s: %w", tarPath, err)
		}
	}
	if push {
		if err := remote.Write(r, img); err != nil {
			return fmt.Errorf("pushing %s: %w", ref, err)
		}
		d, err := img.Digest()
		if err != nil {
			return err
		}
		fmt.Printf("%s@%s\n", r.Context().Name(), d)
	}
	return nil
}

// Build returns a linux/amd64 image of one layer holding the files
// (DEST=SRC each), with the entrypoint and user given.
func Build(files, entrypoint []string, user string) (v1.Image, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	sort.Strings(files)
	for _, f := range files {
		dest, src, ok := strings.Cut(f, "=")
		if !ok || !strings.HasPrefix(dest, "/") {
			return nil, fmt.Errorf("%q: want /DEST=SRC", f)
		}
		for d := path.Dir(dest); d != "/" && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755}); err != nil {
				return nil, err
			}
		}
		b, err := os.ReadFile(src)
		if err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(dest, "/"), Mode: 0o755, Size: int64(len(b))}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(b); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(buf.Bytes())), nil
	})
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Entrypoint = entrypoint
	cf.Config.User = user
	return mutate.ConfigFile(img, cf)
}

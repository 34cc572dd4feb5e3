// Command runtimebase makes a runtime base image (what `builder assemble`
// appends a function's layers to) from a root filesystem that
// hack/runtime-bases.sh built with debootstrap, and pushes it.
//
//	runtimebase layout -rootfs DIR -runtime python3.11 -out LAYOUT [-label k=v ...]
//	runtimebase push -layout LAYOUT -repo 127.0.0.1:5001/sless/runtime-python3.11
//
// The image is one layer, reproducible: entries in lexical order, every
// time 1980-01-01, owners and modes as on disk but without set-id bits,
// hard links as tar links, no device nodes, the image's creation time
// fixed. The same tree gives the same digest. `push` prints the image by
// digest.
package main

import (
	"archive/tar"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// uid is the user a function runs as (the builder's fnimage.UID).
const uid = 10001

var epoch = time.Unix(315532800, 0).UTC() // 1980-01-01, as the builder's layers

// runtimes are the image configs of the two bases: the interpreter as the
// command, so that the base runs alone; assemble replaces the entrypoint.
var runtimes = map[string][]string{
	"python3.11": {"python3"},
	"nodejs20":   {"node"},
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: runtimebase layout|push [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "layout":
		err = layoutCmd(os.Args[2:])
	case "push":
		err = pushCmd(os.Args[2:], os.Stdout)
	default:
		err = fmt.Errorf("unknown command %q: layout or push", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "runtimebase:", err)
		os.Exit(1)
	}
}

type labels map[string]string

func (l labels) String() string { return fmt.Sprint(map[string]string(l)) }
func (l labels) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("label %q is not key=value", s)
	}
	l[k] = v
	return nil
}

func layoutCmd(args []string) error {
	fs := flag.NewFlagSet("layout", flag.ContinueOnError)
	rootfs := fs.String("rootfs", "", "the root filesystem")
	rt := fs.String("runtime", "", "python3.11 or nodejs20")
	out := fs.String("out", "", "the OCI image layout to write (replaced)")
	lbl := labels{}
	fs.Var(lbl, "label", "an image label, key=value (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cmd, ok := runtimes[*rt]
	if !ok || *rootfs == "" || *out == "" {
		return errors.New("layout: -rootfs, -out and -runtime (python3.11 or nodejs20) are required")
	}
	if err := os.RemoveAll(*out); err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	tarPath := filepath.Join(*out, "..", filepath.Base(*out)+".layer.tar")
	defer os.Remove(tarPath)
	if err := writeTar(*rootfs, tarPath); err != nil {
		return fmt.Errorf("layer of %s: %w", *rootfs, err)
	}
	img, err := Image(tarPath, cmd, lbl)
	if err != nil {
		return err
	}
	p, err := layout.Write(*out, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img); err != nil {
		return fmt.Errorf("write %s: %w", *out, err)
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "runtimebase: %s image %s in %s\n", *rt, d, *out)
	return nil
}

// Image is the base image of one layer (the tar at tarPath) with its config.
func Image(tarPath string, cmd []string, lbl map[string]string) (v1.Image, error) {
	layer, err := tarball.LayerFromFile(tarPath, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(mutate.ConfigMediaType(empty.Image, types.OCIConfigJSON), types.OCIManifestSchema1)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, MediaType: types.OCILayer,
		History: v1.History{CreatedBy: "sless runtimebase (debootstrap " + lbl["ru.kube5s.sless.debian.suite"] + ")", Created: v1.Time{Time: epoch}}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS, cf.Created = runtime.GOARCH, "linux", v1.Time{Time: epoch}
	cf.Config.User = fmt.Sprintf("%d:%d", uid, uid)
	cf.Config.WorkingDir = "/tmp"
	cf.Config.Cmd = cmd
	cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin", "LANG=C.UTF-8", "HOME=/tmp"}
	cf.Config.Labels = lbl
	return mutate.ConfigFile(img, cf)
}

// writeTar writes the tree at root into a tar file, in lexical order
// (WalkDir's), every time fixed.
func writeTar(root, out string) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	links := map[[2]uint64]string{} // (dev, inode) -> the first name, for hard links
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		name := filepath.ToSlash(rel)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%s: no owner information", p)
		}
		h := &tar.Header{Name: name, ModTime: epoch, Uid: int(st.Uid), Gid: int(st.Gid), Format: tar.FormatPAX,
			Mode: int64(fi.Mode().Perm())}
		if fi.Mode()&fs.ModeSticky != 0 {
			h.Mode |= 0o1000 // /tmp; set-uid and set-gid bits are dropped: nothing here runs as another user
		}
		switch {
		case fi.IsDir():
			h.Typeflag, h.Name = tar.TypeDir, name+"/"
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			h.Typeflag, h.Linkname = tar.TypeSymlink, target
		case fi.Mode().IsRegular():
			key := [2]uint64{uint64(st.Dev), st.Ino}
			if first, ok := links[key]; ok && st.Nlink > 1 {
				h.Typeflag, h.Linkname = tar.TypeLink, first
				break
			}
			links[key] = name
			h.Typeflag, h.Size = tar.TypeReg, fi.Size()
		default:
			return nil // device nodes, FIFOs, sockets: the runtime provides /dev
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag == tar.TypeReg {
			in, err := os.Open(p)
			if err != nil {
				return err
			}
			n, err := io.Copy(tw, io.LimitReader(in, h.Size))
			in.Close()
			if err != nil {
				return err
			}
			if n != h.Size {
				return fmt.Errorf("%s changed while it was read", p)
			}
		}
		return nil
	})
	if err := errors.Join(err, tw.Close(), f.Close()); err != nil {
		return err
	}
	return nil
}

func pushCmd(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("push", flag.ContinueOnError)
	dir := fs.String("layout", "", "the OCI image layout `runtimebase layout` wrote")
	repo := fs.String("repo", "", "the repository to push to")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" || *repo == "" {
		return errors.New("push: -layout and -repo are required")
	}
	img, err := FromLayout(*dir)
	if err != nil {
		return err
	}
	r, err := name.NewRepository(*repo)
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
	_, err = fmt.Fprintln(stdout, ref)
	return err
}

// FromLayout is the one image of an OCI layout.
func FromLayout(dir string) (v1.Image, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(m.Manifests) != 1 {
		return nil, fmt.Errorf("%s holds %d images, want 1", dir, len(m.Manifests))
	}
	return idx.Image(m.Manifests[0].Digest)
}

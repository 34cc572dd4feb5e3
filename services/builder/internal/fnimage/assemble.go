// Package fnimage makes function images: the wrapper, dependency and code
// layers appended to a runtime base image with go-containerregistry, the
// image's config and labels set, reproducibly, and the image pushed. It is
// `builder assemble`, the last step of a build Job.
package fnimage

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/archive"
	"github.com/kube5s/sless/runtimes"
	"github.com/kube5s/sless/services/builder/internal/build"
)

// Paths and owner inside a function image.
const (
	WrapperDir = "/opt/sless"
	CodeDir    = "/opt/function"
	UID        = 10001
)

// layerEpoch is every file's mtime and the image's creation time: the same
// inputs give the same bytes, hence the same digest (what ko and Jib do).
var layerEpoch = time.Unix(315532800, 0).UTC() // 1980-01-01, the earliest a zip can say

// Labels of a function image.
const (
	LabelSourceSHA256 = "ru.kube5s.sless.source.sha256"
	LabelTenant       = "ru.kube5s.sless.tenant"
	LabelFunction     = "ru.kube5s.sless.function"
	LabelRuntime      = "ru.kube5s.sless.runtime"
	LabelBaseDigest   = "org.opencontainers.image.base.digest"
	LabelBaseName     = "org.opencontainers.image.base.name"
)

// runtimeImage is how one runtime lays out a function image.
type runtimeImage struct {
	// depsFrom is what of the deps step's directory is the dependency
	// layer, and depsTo where it goes.
	depsFrom, depsTo string
	entrypoint       func(wrapper string) []string
	env              []string
}

var runtimeImages = map[string]runtimeImage{
	string(slessv1.RuntimePython311): {depsFrom: ".", depsTo: CodeDir + "/deps",
		entrypoint: func(w string) []string { return []string{"python3", w} },
		env: []string{"PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1", "PYTHONPATH=" + CodeDir + "/deps",
			"SLESS_CODE_DIR=" + CodeDir, "PORT=8080"}},
	string(slessv1.RuntimeNodeJS20): {depsFrom: "node_modules", depsTo: CodeDir + "/node_modules",
		entrypoint: func(w string) []string { return []string{"node", w} },
		env:        []string{"NODE_ENV=production", "SLESS_CODE_DIR=" + CodeDir, "PORT=8080"}},
}

// Request is one `builder assemble` run: the last step of a build Job, and
// the only one that holds the registry credentials.
type Request struct {
	Runtime      string
	Base         string // the runtime base image, name@sha256:...
	Code         string // the checked code (prepare-context's code/)
	Deps         string // the deps step's output; may be missing or empty
	Destination  string // <registry>/<tenant>/<function>
	Tag          string // pushed besides the digest, for people browsing the registry
	SourceSHA256 string
	Tenant       string
	Function     string
	Insecure     bool // plain HTTP to a registry that is not on loopback
	Keychain     authn.Keychain
	TempDir      string // where layer files are written; the system's by default
}

// Assemble appends the wrapper, dependency and code layers to the base
// image, sets its config, pushes it and returns its digest.
func Assemble(ctx context.Context, req Request, log io.Writer) (v1.Hash, error) {
	dir, err := os.MkdirTemp(req.TempDir, "sless-assemble-")
	if err != nil {
		return v1.Hash{}, err
	}
	defer os.RemoveAll(dir)
	img, err := Image(ctx, req, dir)
	if err != nil {
		return v1.Hash{}, err
	}
	var opts []name.Option
	if req.Insecure {
		opts = append(opts, name.Insecure)
	}
	repo, err := name.NewRepository(req.Destination, opts...)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("destination %q: %w", req.Destination, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	var ref name.Reference = repo.Digest(digest.String())
	if req.Tag != "" {
		ref = repo.Tag(req.Tag)
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx), remote.WithAuthFromKeychain(keychain(req.Keychain))); err != nil {
		return v1.Hash{}, fmt.Errorf("push %s: %w", ref, err)
	}
	fmt.Fprintf(log, "pushed %s@%s\n", repo, digest)
	return digest, nil
}

func keychain(k authn.Keychain) authn.Keychain {
	if k == nil {
		return authn.DefaultKeychain // $DOCKER_CONFIG/config.json: the push secret
	}
	return k
}

// Image builds the function image without pushing it; its layers are files
// in dir, which must stay until the image has been written.
func Image(ctx context.Context, req Request, dir string) (v1.Image, error) {
	rt, ok := runtimeImages[req.Runtime]
	if !ok {
		return nil, build.Fail(archive.ReasonUnsupportedRuntime, "unsupported runtime %q", req.Runtime)
	}
	wrapper, err := runtimes.WrapperOf(req.Runtime)
	if err != nil {
		return nil, build.Fail(archive.ReasonUnsupportedRuntime, "%v", err)
	}
	var opts []name.Option
	if req.Insecure {
		opts = append(opts, name.Insecure)
	}
	// Only a digest: a tag could give two builds of one source two bases.
	baseRef, err := name.NewDigest(req.Base, opts...)
	if err != nil {
		return nil, fmt.Errorf("base image %q must be pinned by digest: %w", req.Base, err)
	}
	if _, err := os.Stat(req.Code); err != nil {
		return nil, fmt.Errorf("code directory: %w", err)
	}
	base, err := remote.Image(baseRef, remote.WithContext(ctx), remote.WithAuthFromKeychain(keychain(req.Keychain)))
	if err != nil {
		return nil, fmt.Errorf("fetch base image %s: %w", baseRef, err)
	}
	mt, err := base.MediaType()
	if err != nil {
		return nil, err
	}
	layerType := types.DockerLayer
	if mt == types.OCIManifestSchema1 {
		layerType = types.OCILayer
	}

	wrapperPath := path.Join(WrapperDir, wrapper.Name)
	var adds []mutate.Addendum
	add := func(what string, entries []tarEntry) error {
		l, err := layerOf(dir, entries, layerType)
		if err != nil {
			return fmt.Errorf("%s layer: %w", what, err)
		}
		adds = append(adds, mutate.Addendum{Layer: l, MediaType: layerType,
			History: v1.History{CreatedBy: "sless builder assemble: " + what, Created: v1.Time{Time: layerEpoch}}})
		return nil
	}
	// Wrapper first, code last: the layers that change least come first.
	if err := add("wrapper", append(parents(WrapperDir), tarEntry{name: wrapperPath, mode: 0o644, data: wrapper.Data})); err != nil {
		return nil, err
	}
	if req.Deps != "" {
		from := filepath.Join(req.Deps, rt.depsFrom)
		if fi, err := os.Stat(from); err == nil && fi.IsDir() {
			entries, err := dirEntries(from, rt.depsTo)
			if err != nil {
				return nil, err
			}
			if len(entries) > 1 { // more than the directory itself
				if err := add("dependencies", append(parents(path.Dir(rt.depsTo)), entries...)); err != nil {
					return nil, err
				}
			}
		}
	}
	code, err := dirEntries(req.Code, CodeDir)
	if err != nil {
		return nil, err
	}
	if err := add("code", append(parents(path.Dir(CodeDir)), code...)); err != nil {
		return nil, err
	}
	img, err := mutate.Append(base, adds...)
	if err != nil {
		return nil, err
	}

	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg := cf.Config.DeepCopy()
	cfg.Entrypoint = rt.entrypoint(wrapperPath)
	cfg.Cmd = nil
	cfg.User = fmt.Sprintf("%d:%d", UID, UID)
	cfg.WorkingDir = CodeDir
	cfg.Env = MergeEnv(cfg.Env, rt.env)
	cfg.ExposedPorts = map[string]struct{}{"8080/tcp": {}}
	labels := map[string]string{}
	for k, v := range cfg.Labels {
		labels[k] = v
	}
	labels[LabelSourceSHA256] = req.SourceSHA256
	labels[LabelTenant] = req.Tenant
	labels[LabelFunction] = req.Function
	labels[LabelRuntime] = req.Runtime
	labels[LabelBaseDigest] = baseRef.DigestStr()
	labels[LabelBaseName] = baseRef.Context().Name()
	cfg.Labels = labels
	if img, err = mutate.Config(img, *cfg); err != nil {
		return nil, err
	}
	return mutate.CreatedAt(img, v1.Time{Time: layerEpoch})
}

// MergeEnv sets each of set (KEY=value) in env, replacing a KEY there: how
// the image's config takes the runtime's settings over the base's, and how
// a container's env overrides its image's.
func MergeEnv(env, set []string) []string {
	out := slices.Clone(env)
	for _, kv := range set {
		k, _, _ := strings.Cut(kv, "=")
		i := slices.IndexFunc(out, func(e string) bool { return strings.HasPrefix(e, k+"=") })
		if i >= 0 {
			out[i] = kv
		} else {
			out = append(out, kv)
		}
	}
	return out
}

// tarEntry is one file, directory or symlink of a layer.
type tarEntry struct {
	name     string // absolute path in the image
	mode     fs.FileMode
	dir      bool
	linkname string // a symlink's target
	data     []byte
	file     string // read the content from this file when data is nil
}

// parents are the directory entries of p and its parents, top first.
func parents(p string) []tarEntry {
	var out []tarEntry
	for d := p; d != "/" && d != "."; d = path.Dir(d) {
		out = append([]tarEntry{{name: d, mode: 0o755, dir: true}}, out...)
	}
	return out
}

// dirEntries lists root as the image directory at, in lexical order (WalkDir's).
// Symlinks are kept as links (npm's .bin); nothing else but files and
// directories is carried.
func dirEntries(root, at string) ([]tarEntry, error) {
	var out []tarEntry
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		target := path.Join(at, filepath.ToSlash(rel))
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			out = append(out, tarEntry{name: target, mode: 0o755, dir: true})
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out = append(out, tarEntry{name: target, mode: 0o777, linkname: link})
		case d.Type().IsRegular():
			mode := fs.FileMode(0o644)
			if info.Mode()&0o111 != 0 {
				mode = 0o755
			}
			out = append(out, tarEntry{name: target, mode: mode, file: p})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", root, err)
	}
	return out, nil
}

// layerOf writes entries into a tar file in dir (the dependencies can be
// large) and makes it a gzip layer. Times, owners and order are fixed, so
// that the same entries give the same digest.
func layerOf(dir string, entries []tarEntry, mt types.MediaType) (v1.Layer, error) {
	f, err := os.CreateTemp(dir, "layer-*.tar")
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(f)
	for _, e := range entries {
		if err := writeEntry(tw, e); err != nil {
			f.Close()
			return nil, err
		}
	}
	if err := errors.Join(tw.Close(), f.Close()); err != nil {
		return nil, err
	}
	name := f.Name()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return os.Open(name) },
		tarball.WithMediaType(mt), tarball.WithCompressedCaching)
}

func writeEntry(tw *tar.Writer, e tarEntry) error {
	h := &tar.Header{Name: strings.TrimPrefix(e.name, "/"), Mode: int64(e.mode), Uid: UID, Gid: UID, ModTime: layerEpoch}
	var src io.Reader
	switch {
	case e.dir:
		h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
	case e.linkname != "":
		h.Typeflag, h.Linkname = tar.TypeSymlink, e.linkname
	case e.data != nil:
		h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		src = bytes.NewReader(e.data)
	default:
		in, err := os.Open(e.file)
		if err != nil {
			return err
		}
		defer in.Close()
		fi, err := in.Stat()
		if err != nil {
			return err
		}
		h.Typeflag, h.Size = tar.TypeReg, fi.Size()
		src = io.LimitReader(in, fi.Size())
	}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if src != nil {
		if n, err := io.Copy(tw, src); err != nil || n != h.Size {
			return errors.Join(err, fmt.Errorf("%s changed while it was read", e.name))
		}
	}
	return nil
}

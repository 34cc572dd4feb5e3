package fnimage

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kube5s/sless/pkg/archive"
	"github.com/kube5s/sless/pkg/testenv"
	"github.com/kube5s/sless/runtimes"
	"github.com/kube5s/sless/services/builder/internal/imagetest"
)

// testBase pushes a tiny base image (one layer with /etc/os-release, a
// PATH, a label and a root user, as Debian images have) to the test
// registry and returns it by digest. oci chooses OCI media types over
// Docker ones.
func testBase(t *testing.T, reg string, oci bool) string {
	t.Helper()
	return testBaseImage(t, reg, oci, []string{"PATH=/usr/local/bin:/usr/bin:/bin", "PORT=1"})
}

func testBaseImage(t *testing.T, reg string, oci bool, env []string) string {
	t.Helper()
	img := empty.Image
	layerType := types.DockerLayer
	if oci {
		img = mutate.MediaType(mutate.ConfigMediaType(img, types.OCIConfigJSON), types.OCIManifestSchema1)
		layerType = types.OCILayer
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	body := []byte("ID=test\n")
	for _, h := range []*tar.Header{{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "etc/os-release", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))}} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	tw.Write(body)
	tw.Close()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil },
		tarball.WithMediaType(layerType))
	if err != nil {
		t.Fatal(err)
	}
	img, err = mutate.AppendLayers(img, layer)
	if err != nil {
		t.Fatal(err)
	}
	img, err = mutate.Config(img, v1.Config{Env: env, Cmd: []string{"sh"},
		Labels: map[string]string{"org.debian.release": "test"}})
	if err != nil {
		t.Fatal(err)
	}
	repo, err := name.NewRepository(reg + "/" + testenv.Name("base-"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	ref := repo.Digest(d.String())
	if err := remote.Write(ref, img, remote.WithContext(t.Context())); err != nil {
		t.Fatalf("push the test base image: %v", err)
	}
	return ref.String()
}

// fnDir writes files (name -> content; a "->" prefix makes a symlink) under a new directory.
func fnDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for n, body := range files {
		p := filepath.Join(dir, n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if target, ok := strings.CutPrefix(body, "->"); ok {
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// layerFiles lists a layer's entries as "name mode uid:gid mtime" (and its
// content or link target for files under opt/).
func layerFiles(t *testing.T, l v1.Layer) map[string]string {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	out := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		desc := h.FileInfo().Mode().String() + " " + strconv.Itoa(h.Uid) + ":" + strconv.Itoa(h.Gid) + " " + h.ModTime.UTC().Format(time.DateOnly)
		if h.Typeflag == tar.TypeSymlink {
			desc += " -> " + h.Linkname
		} else if h.Typeflag == tar.TypeReg && len(b) < 200 {
			desc += " " + string(b)
		}
		out[h.Name] = desc
	}
}

// TestAssemblePushesTheFunctionImage: the image in the registry is the base
// (its layers untouched, first) plus the wrapper, dependency and code
// layers, every entry owned by 10001 with the fixed time, and the config
// runs the wrapper as 10001 in the code directory, with the labels that
// name the source and the base.
func TestAssemblePushesTheFunctionImage(t *testing.T) {
	reg := testenv.Registry(t)
	for _, oci := range []bool{false, true} {
		t.Run(map[bool]string{false: "docker base", true: "oci base"}[oci], func(t *testing.T) {
			base := testBase(t, reg, oci)
			sha := strings.Repeat("ab", 32)
			dest := reg + "/" + testenv.Name("acme-") + "/hello"
			code := fnDir(t, map[string]string{"main.py": "def handler(e, c):\n    return 'hi'\n", "requirements.txt": "six==1.16.0\n", "lib/x.py": "X = 1\n"})
			if err := os.Chmod(filepath.Join(code, "lib", "x.py"), 0o700); err != nil {
				t.Fatal(err)
			}
			deps := fnDir(t, map[string]string{"six.py": "# six\n"})
			var log bytes.Buffer
			d, err := Assemble(t.Context(), Request{Runtime: "python3.11", Base: base, Code: code, Deps: deps, Destination: dest,
				Tag: sha[:12], SourceSHA256: sha, Tenant: "acme", Function: "hello"}, &log)
			if err != nil {
				t.Fatalf("assemble: %v\n%s", err, log.String())
			}
			img := imagetest.Pull(t, dest, d)
			baseName, baseDigest, _ := strings.Cut(base, "@")
			baseHash, err := v1.NewHash(baseDigest)
			if err != nil {
				t.Fatal(err)
			}
			baseImg := imagetest.Pull(t, baseName, baseHash)
			mt, _ := img.MediaType()
			if wantMT, _ := baseImg.MediaType(); mt != wantMT {
				t.Errorf("manifest media type %s, want the base's %s", mt, wantMT)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			want := v1.Config{
				User: "10001:10001", WorkingDir: "/opt/function", Entrypoint: []string{"python3", "/opt/sless/runtime.py"},
				Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "PORT=8080", "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1",
					"PYTHONPATH=/opt/function/deps", "SLESS_CODE_DIR=/opt/function"},
				ExposedPorts: map[string]struct{}{"8080/tcp": {}},
				Labels: map[string]string{"org.debian.release": "test", LabelSourceSHA256: sha, LabelTenant: "acme", LabelFunction: "hello",
					LabelRuntime: "python3.11", LabelBaseDigest: baseDigest, LabelBaseName: baseName},
			}
			if diff := cmp.Diff(want, cf.Config); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
			layers, err := img.Layers()
			if err != nil {
				t.Fatal(err)
			}
			baseLayers, _ := baseImg.Layers()
			if len(layers) != len(baseLayers)+3 {
				t.Fatalf("%d layers, want the base's %d and wrapper, deps, code", len(layers), len(baseLayers))
			}
			bd, _ := baseLayers[0].Digest()
			if ld, _ := layers[0].Digest(); ld != bd {
				t.Errorf("first layer %s, want the base's %s", ld, bd)
			}
			wrapper, _ := runtimes.WrapperOf("python3.11")
			if diff := cmp.Diff(map[string]string{
				"opt/":                 "drwxr-xr-x 10001:10001 1980-01-01",
				"opt/sless/":           "drwxr-xr-x 10001:10001 1980-01-01",
				"opt/sless/runtime.py": "-rw-r--r-- 10001:10001 1980-01-01",
			}, layerFiles(t, layers[1])); diff != "" {
				t.Errorf("wrapper layer (-want +got):\n%s", diff)
			}
			if got := fileIn(t, layers[1], "opt/sless/runtime.py"); !bytes.Equal(got, wrapper.Data) {
				t.Error("the image's runtime.py is not the embedded wrapper")
			}
			if diff := cmp.Diff(map[string]string{
				"opt/":                     "drwxr-xr-x 10001:10001 1980-01-01",
				"opt/function/":            "drwxr-xr-x 10001:10001 1980-01-01",
				"opt/function/deps/":       "drwxr-xr-x 10001:10001 1980-01-01",
				"opt/function/deps/six.py": "-rw-r--r-- 10001:10001 1980-01-01 # six\n",
			}, layerFiles(t, layers[2])); diff != "" {
				t.Errorf("dependency layer (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(map[string]string{
				"opt/":                          "drwxr-xr-x 10001:10001 1980-01-01",
				"opt/function/":                 "drwxr-xr-x 10001:10001 1980-01-01",
				"opt/function/lib/":             "drwxr-xr-x 10001:10001 1980-01-01",
				"opt/function/lib/x.py":         "-rwxr-xr-x 10001:10001 1980-01-01 X = 1\n",
				"opt/function/main.py":          "-rw-r--r-- 10001:10001 1980-01-01 def handler(e, c):\n    return 'hi'\n",
				"opt/function/requirements.txt": "-rw-r--r-- 10001:10001 1980-01-01 six==1.16.0\n",
			}, layerFiles(t, layers[3])); diff != "" {
				t.Errorf("code layer (-want +got):\n%s", diff)
			}
			// The tag names the source, for people; the build uses the digest.
			tagged, err := remote.Head(mustTag(t, dest+":"+sha[:12]), remote.WithContext(t.Context()))
			if err != nil || tagged.Digest != d {
				t.Errorf("tag %s: %v %v, want %s", sha[:12], tagged, err, d)
			}
		})
	}
}

// fileIn is the content of one file of a layer.
func fileIn(t *testing.T, l v1.Layer, file string) []byte {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("%s not in the layer: %v", file, err)
		}
		if h.Name == file {
			b, _ := io.ReadAll(tr)
			return b
		}
	}
}

func mustTag(t *testing.T, s string) name.Tag {
	t.Helper()
	tag, err := name.NewTag(s)
	if err != nil {
		t.Fatal(err)
	}
	return tag
}

// TestAssembleIsReproducible: the same code, dependencies and base give
// the same image digest, whatever the files' times on disk and wherever
// they are; other code gives another.
func TestAssembleIsReproducible(t *testing.T) {
	reg := testenv.Registry(t)
	base := testBase(t, reg, true)
	dest := reg + "/" + testenv.Name("acme-") + "/again"
	files := map[string]string{"index.js": "exports.handler = async () => 'hi';\n", "package.json": `{"name":"again"}`, "lib/a.js": "module.exports = 1;\n"}
	deps := map[string]string{"node_modules/is-number/index.js": "module.exports = () => true;\n", "node_modules/.bin/is-number": "->../is-number/index.js"}
	build := func(files map[string]string, mtime time.Time) v1.Hash {
		t.Helper()
		code, depDir := fnDir(t, files), fnDir(t, deps)
		for _, dir := range []string{code, depDir} {
			filepath.WalkDir(dir, func(p string, _ os.DirEntry, _ error) error { return os.Chtimes(p, mtime, mtime) })
		}
		d, err := Assemble(t.Context(), Request{Runtime: "nodejs20", Base: base, Code: code, Deps: depDir, Destination: dest,
			SourceSHA256: strings.Repeat("cd", 32), Tenant: "acme", Function: "again"}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	first := build(files, time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC))
	if again := build(files, time.Now()); again != first {
		t.Errorf("two builds of the same source: %s and %s", first, again)
	}
	files["lib/a.js"] = "module.exports = 2;\n"
	if other := build(files, time.Now()); other == first {
		t.Error("other code gave the same digest")
	}
}

// TestAssembleDependencyLayer: a requirements.txt function's deps directory
// becomes /opt/function/deps, a package.json function's node_modules
// becomes /opt/function/node_modules (links kept); without dependencies
// there is no such layer.
func TestAssembleDependencyLayer(t *testing.T) {
	reg := testenv.Registry(t)
	base := testBase(t, reg, false)
	for _, tc := range []struct {
		name, runtime string
		code, deps    map[string]string
		want          map[string]string // in the layer after the wrapper's; nil: no dependency layer
	}{
		{"requirements.txt", "python3.11", map[string]string{"main.py": "import six\n", "requirements.txt": "six\n"},
			map[string]string{"six.py": "# six\n", "six-1.16.0.dist-info/METADATA": "Name: six\n"},
			map[string]string{"opt/": "d", "opt/function/": "d", "opt/function/deps/": "d", "opt/function/deps/six.py": "f",
				"opt/function/deps/six-1.16.0.dist-info/": "d", "opt/function/deps/six-1.16.0.dist-info/METADATA": "f"}},
		{"package.json", "nodejs20", map[string]string{"index.js": "require('is-number');\n", "package.json": "{}", "package-lock.json": "{}"},
			map[string]string{"package.json": "{}", "node_modules/is-number/index.js": "x\n", "node_modules/.bin/is-number": "->../is-number/index.js"},
			map[string]string{"opt/": "d", "opt/function/": "d", "opt/function/node_modules/": "d", "opt/function/node_modules/.bin/": "d",
				"opt/function/node_modules/.bin/is-number": "l", "opt/function/node_modules/is-number/": "d",
				"opt/function/node_modules/is-number/index.js": "f"}},
		{"no dependencies", "nodejs20", map[string]string{"index.js": "exports.handler = () => 1;\n"}, map[string]string{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dest := reg + "/" + testenv.Name("acme-") + "/deps"
			d, err := Assemble(t.Context(), Request{Runtime: tc.runtime, Base: base, Code: fnDir(t, tc.code), Deps: fnDir(t, tc.deps),
				Destination: dest, SourceSHA256: strings.Repeat("ef", 32), Tenant: "acme", Function: "deps"}, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			layers, err := imagetest.Pull(t, dest, d).Layers()
			if err != nil {
				t.Fatal(err)
			}
			// base, wrapper, [deps,] code
			if tc.want == nil {
				if len(layers) != 3 {
					t.Fatalf("%d layers, want base, wrapper and code", len(layers))
				}
				return
			}
			if len(layers) != 4 {
				t.Fatalf("%d layers, want base, wrapper, deps and code", len(layers))
			}
			got := map[string]string{}
			for n, desc := range layerFiles(t, layers[2]) {
				got[n] = map[byte]string{'d': "d", '-': "f", 'L': "l"}[desc[0]]
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("dependency layer (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAssembleRefusesABaseByTag: a tag could move between two builds of one
// source; only a digest is taken, and nothing is pushed.
func TestAssembleRefusesABaseByTag(t *testing.T) {
	_, err := Image(t.Context(), Request{Runtime: "python3.11", Base: "127.0.0.1:1/python:3.11", Code: t.TempDir()}, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "pinned by digest") {
		t.Errorf("error %v, want a refusal of the tag", err)
	}
	_, err = Image(t.Context(), Request{Runtime: "ruby3", Base: "127.0.0.1:1/r@sha256:" + strings.Repeat("0", 64), Code: t.TempDir()}, t.TempDir())
	var be *archive.Error
	if !errors.As(err, &be) || be.Reason != archive.ReasonUnsupportedRuntime {
		t.Errorf("error %v, want %s", err, archive.ReasonUnsupportedRuntime)
	}
}

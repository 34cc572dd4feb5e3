package kubejob

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kube5s/sless/pkg/testenv"
	"github.com/kube5s/sless/services/builder/internal/fnimage"
	"github.com/kube5s/sless/services/builder/internal/imagetest"
)

// TestDepsStepRunsInTheRuntimeBase runs the build Job's deps step (its
// very script) in each real runtime base, as 10001 with a read-only root
// and only /workspace and /tmp writable, as the Job does; then assembles
// the function with what it installed and calls it: the function imports
// the dependency. The package comes from the workspace (a wheel made here
// for pip, a package tarball for npm; PIP_NO_INDEX and npm's offline
// mode), since PyPI cannot be reached from this machine.
func TestDepsStepRunsInTheRuntimeBase(t *testing.T) {
	reg := testenv.Registry(t)
	for _, rt := range []struct {
		runtime, file, code, manifest, manifestName string
		env                                         []string
		pkg                                         func(t *testing.T, dir string)
	}{{
		runtime: "python3.11", file: "main.py",
		code:     "import slesstestdep\n\ndef handler(event, context):\n    return {\"dep\": slesstestdep.VALUE}\n",
		manifest: "slesstestdep==1.0\n", manifestName: "requirements.txt",
		env: []string{"PIP_NO_INDEX=1", "PIP_FIND_LINKS=/workspace/packages"},
		pkg: writeWheel,
	}, {
		runtime: "nodejs20", file: "index.js",
		code:     "const dep = require(\"slesstestdep\");\nexports.handler = async () => ({ dep: dep.VALUE });\n",
		manifest: `{"name": "fn", "version": "1.0.0", "dependencies": {"slesstestdep": "file:/workspace/packages/slesstestdep-1.0.0.tgz"}}`, manifestName: "package.json",
		env: []string{"npm_config_offline=true"},
		pkg: writeNpmPackage,
	}} {
		t.Run(rt.runtime, func(t *testing.T) {
			base := imagetest.RuntimeBase(t, reg, rt.runtime)
			baseImg := pullRef(t, base)
			cf, err := baseImg.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			root := t.TempDir()
			if err := imagetest.Unpack(baseImg, root); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(root, 0o755); err != nil {
				t.Fatal(err)
			}
			// The Job's volumes: the workspace the context step filled,
			// and an emptyDir /tmp; both writable by 10001 (fsGroup).
			ws, tmp := t.TempDir(), t.TempDir()
			for _, d := range []string{"code", "packages"} {
				if err := os.MkdirAll(filepath.Join(ws, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			writeFile(t, filepath.Join(ws, "code", rt.file), rt.code)
			writeFile(t, filepath.Join(ws, "code", rt.manifestName), rt.manifest)
			rt.pkg(t, filepath.Join(ws, "packages"))
			for _, d := range []string{ws, tmp, filepath.Join(ws, "code"), filepath.Join(ws, "packages")} {
				if err := os.Chown(d, fnimage.UID, fnimage.UID); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.MkdirAll(filepath.Join(root, "workspace"), 0o755); err != nil {
				t.Fatal(err)
			}
			env := fnimage.MergeEnv(cf.Config.Env, append([]string{"HOME=/tmp", "TMPDIR=/tmp", "npm_config_cache=/tmp/.npm",
				"npm_config_update_notifier=false", "SOURCE_DATE_EPOCH=315532800"}, rt.env...))
			cmd := imagetest.Chrooted(root, fmt.Sprintf("%d:%d", fnimage.UID, fnimage.UID), "/workspace", env,
				map[string]string{ws: "workspace", tmp: "tmp"}, true, "sh", "-c", depsScripts[rt.runtime])
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("the deps step failed: %v\n%s", err, out)
			}
			t.Logf("deps step:\n%s", out)

			dest := reg + "/" + testenv.Name("acme-") + "/deps"
			d, err := fnimage.Assemble(t.Context(), fnimage.Request{Runtime: rt.runtime, Base: base, Code: filepath.Join(ws, "code"),
				Deps: filepath.Join(ws, "deps"), Destination: dest, SourceSHA256: strings.Repeat("cd", 32), Tenant: "test", Function: "deps"}, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			url := imagetest.Run(t, imagetest.Pull(t, dest, d), "SLESS_FUNCTION=deps", "SLESS_TENANT=test", "SLESS_WORKERS=1")
			res, err := http.Get(url + "/")
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			var got map[string]string
			if err := json.NewDecoder(res.Body).Decode(&got); err != nil || res.StatusCode != http.StatusOK || got["dep"] != "from the workspace" {
				t.Fatalf("the function answered %d %v (%v), want its dependency's value", res.StatusCode, got, err)
			}
		})
	}
}

func writeFile(t *testing.T, p, body string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeWheel writes slesstestdep-1.0, a pure-Python wheel, into dir.
func writeWheel(t *testing.T, dir string) {
	t.Helper()
	files := [][2]string{
		{"slesstestdep/__init__.py", "VALUE = \"from the workspace\"\n"},
		{"slesstestdep-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: slesstestdep\nVersion: 1.0\n"},
		{"slesstestdep-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: sless-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	var record strings.Builder
	for _, f := range files {
		w, err := zw.Create(f[0])
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, f[1])
		sum := sha256.Sum256([]byte(f[1]))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f[0], base64.RawURLEncoding.EncodeToString(sum[:]), len(f[1]))
	}
	record.WriteString("slesstestdep-1.0.dist-info/RECORD,,\n")
	w, err := zw.Create("slesstestdep-1.0.dist-info/RECORD")
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(w, record.String())
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "slesstestdep-1.0-py3-none-any.whl"), buf.String())
}

// writeNpmPackage writes slesstestdep-1.0.0.tgz, an npm package tarball,
// into dir.
func writeNpmPackage(t *testing.T, dir string) {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, f := range [][2]string{
		{"package/package.json", `{"name": "slesstestdep", "version": "1.0.0", "main": "index.js"}`},
		{"package/index.js", "exports.VALUE = \"from the workspace\";\n"},
	} {
		if err := tw.WriteHeader(&tar.Header{Name: f[0], Mode: 0o644, Size: int64(len(f[1])), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, f[1])
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "slesstestdep-1.0.0.tgz"), buf.String())
}

// pullRef pulls an image by its name@digest.
func pullRef(t *testing.T, ref string) v1.Image {
	t.Helper()
	d, err := name.NewDigest(ref)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(d, remote.WithContext(t.Context()))
	if err != nil {
		t.Fatalf("pull %s: %v", ref, err)
	}
	return img
}

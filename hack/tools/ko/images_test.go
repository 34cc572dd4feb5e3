package ko

import (
	"archive/tar"
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestImagesAreNonRootAndRun runs hack/images.sh (make images) against the
// test registry, pulls each of the five images back by the digest it
// printed, and checks that it runs as a non-root user and that its
// entrypoint is the service's static binary: run from the image's own
// filesystem, it starts and refuses a bad setting with its own message.
func TestImagesAreNonRootAndRun(t *testing.T) {
	reg := os.Getenv("SLESS_TEST_REGISTRY")
	if reg == "" {
		t.Fatal(`SLESS_TEST_REGISTRY is not set; eval "$(hack/deps.sh env)" first`)
	}
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), filepath.Join(root, "hack", "images.sh"))
	cmd.Env = append(os.Environ(), "SLESS_IMAGE_REPO="+reg+"/sless-test")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/images.sh: %v", err)
	}
	refs := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		svc, ref, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			t.Fatalf("unexpected line %q", sc.Text())
		}
		refs[svc] = ref
	}
	for _, svc := range []string{"gateway", "builder", "operator", "invoker", "scheduler"} {
		t.Run(svc, func(t *testing.T) {
			ref, err := name.NewDigest(refs[svc])
			if err != nil {
				t.Fatalf("%s: %q is not an image by digest: %v", svc, refs[svc], err)
			}
			img, err := remote.Image(ref, remote.WithContext(t.Context()))
			if err != nil {
				t.Fatal(err)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			user, _, _ := strings.Cut(cf.Config.User, ":")
			if user == "" || user == "0" || user == "root" {
				t.Errorf("runs as %q, want a non-root user", cf.Config.User)
			}
			if len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != "/ko-app/"+svc {
				t.Fatalf("entrypoint %q, want /ko-app/%s", cf.Config.Entrypoint, svc)
			}
			// The entrypoint from the image's flattened filesystem.
			dir := t.TempDir()
			rc := mutate.Extract(img)
			defer rc.Close()
			bin := filepath.Join(dir, svc)
			if err := extractFile(rc, strings.TrimPrefix(cf.Config.Entrypoint[0], "/"), bin); err != nil {
				t.Fatal(err)
			}
			version, err := exec.CommandContext(t.Context(), bin, "--version").CombinedOutput()
			if err != nil || !strings.HasPrefix(string(version), "sless-"+svc+" ") {
				t.Errorf("the entrypoint --version: %v, printed %q; want sless-%s <version> <go version>", err, version, svc)
			}
			t.Logf("%s --version: %s", svc, strings.TrimSpace(string(version)))
			run := exec.CommandContext(t.Context(), bin)
			run.Env = []string{"LOG_LEVEL=bogus"}
			msg, err := run.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(msg), "LOG_LEVEL") {
				t.Errorf("the entrypoint ran with %v and said %q; want exit 1 naming LOG_LEVEL", err, msg)
			}
		})
	}
}

// extractFile writes the file at name (following ko's symlink) of a
// flattened image filesystem to dst, executable.
func extractFile(r io.Reader, name, dst string) error {
	tr := tar.NewReader(r)
	links := map[string]string{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		n := strings.TrimPrefix(strings.TrimPrefix(h.Name, "./"), "/")
		switch h.Typeflag {
		case tar.TypeSymlink:
			links[n] = h.Linkname
		case tar.TypeReg:
			if n != name {
				continue
			}
			f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, tr); err != nil {
				f.Close()
				return err
			}
			return f.Close()
		}
	}
	if target, ok := links[name]; ok {
		return errors.New(name + " is a symlink to " + target + ", not followed")
	}
	return errors.New(name + " is not in the image")
}

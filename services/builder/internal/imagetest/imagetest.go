// Package imagetest runs images in the builder's tests: the runtime bases
// that hack/runtime-bases.sh builds, pushed to the test registry; an image
// pulled back, unpacked and started chrooted into its own filesystem in
// namespaces of its own (which needs root).
package imagetest

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kube5s/sless/pkg/testenv"
)

// RuntimeBase pushes the cached runtime base (an OCI layout that
// hack/runtime-bases.sh built; `make test` and `make runtime-bases` build
// it) to the test registry and returns it by digest.
func RuntimeBase(t *testing.T, reg, runtime string) string {
	t.Helper()
	env := map[string]string{"python3.11": "SLESS_TEST_RUNTIME_BASE_PYTHON311", "nodejs20": "SLESS_TEST_RUNTIME_BASE_NODEJS20"}[runtime]
	dir := os.Getenv(env)
	if dir == "" {
		t.Fatalf("%s is not set: run `eval \"$(hack/deps.sh env)\"` after `hack/runtime-bases.sh build` (make runtime-bases)", env)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("the %s base is not built (%v): run `hack/runtime-bases.sh build` (make runtime-bases) as root", runtime, err)
	}
	m, err := idx.IndexManifest()
	if err != nil || len(m.Manifests) != 1 {
		t.Fatalf("the layout %s: %v, %d images", dir, err, len(m.Manifests))
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.NewDigest(reg + "/sless/runtime-" + runtime + "@" + m.Manifests[0].Digest.String())
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithContext(t.Context())); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	return ref.String()
}

// Run unpacks img and starts its entrypoint chrooted into it, in a
// mount and PID namespace of its own (so that nothing it starts outlives
// the test), with the image's user, working directory and environment
// plus env and PORT; it returns the URL once /_/health answers 200. It
// needs root (namespaces, chroot, the files' owners).
func Run(t *testing.T, img v1.Image, env ...string) string {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := Unpack(img, root); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o755); err != nil { // the image's /, which 10001 must enter
		t.Fatal(err)
	}
	for _, dir := range []string{"dev", "proc"} {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	port := freePort(t)
	cmdEnv := append(append(append([]string{}, cf.Config.Env...), env...), fmt.Sprintf("PORT=%d", port), "SLESS_HOST=127.0.0.1")
	cmd := Chrooted(root, cf.Config.User, cf.Config.WorkingDir, cmdEnv, nil, false, cf.Config.Entrypoint...)
	logs := &testenv.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// SIGKILL to unshare kills its child (--kill-child), the PID
	// namespace's first process, and with it every process in it.
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	testenv.Eventually(t, 60*time.Second, "the image's entrypoint to become healthy", func() (bool, string) {
		res, err := http.Get(url + "/_/health")
		if err != nil {
			return false, fmt.Sprintf("%v; its output:\n%s", err, logs.String())
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK, fmt.Sprintf("status %d; its output:\n%s", res.StatusCode, logs.String())
	})
	return url
}

// Chrooted is a command that runs args in root (an unpacked image) as
// user, in dir, with env: in a mount and PID namespace of its own, with
// the host's /dev, the namespace's /proc and binds (host directory ->
// path in root) mounted; with readOnly, the root itself is read-only, as
// a pod's readOnlyRootFilesystem. The host's chroot starts the image's own
// env, which finds args[0] on the image's PATH. The mounts vanish with
// the namespace.
func Chrooted(root, user, dir string, env []string, binds map[string]string, readOnly bool, args ...string) *exec.Cmd {
	var script strings.Builder
	fmt.Fprintf(&script, "set -e\nmount --make-rprivate /\n")
	if readOnly {
		fmt.Fprintf(&script, "mount --bind %[1]q %[1]q\n", root)
	}
	fmt.Fprintf(&script, "mount --rbind /dev %q\nmount -t proc proc %q\n", filepath.Join(root, "dev"), filepath.Join(root, "proc"))
	for _, from := range slices.Sorted(maps.Keys(binds)) {
		fmt.Fprintf(&script, "mount --bind %q %q\n", from, filepath.Join(root, binds[from]))
	}
	if readOnly {
		fmt.Fprintf(&script, "mount -o remount,bind,ro %q\n", root)
	}
	fmt.Fprintf(&script, "exec chroot --userspec=%s %q /usr/bin/env -C %q \"$@\"", user, root, dir)
	cmd := exec.Command("unshare", append([]string{"--mount", "--pid", "--fork", "--kill-child", "--", "sh", "-c", script.String(), "sh"}, args...)...)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Unpack writes an image's flattened filesystem into dir, with its owners
// and modes (set-id bits aside). mutate.Extract gives each path once, the
// upper layers first, so a directory's own entry may follow its files:
// its mode and owner are set whenever it comes.
func Unpack(img v1.Image, dir string) error {
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		p := filepath.Join(dir, filepath.Clean("/"+h.Name))
		mode := os.FileMode(h.Mode) & os.ModePerm
		if h.Mode&0o1000 != 0 {
			mode |= os.ModeSticky
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.Symlink(h.Linkname, p); err != nil {
				return err
			}
		case tar.TypeLink:
			// The link's target came first in the layer; Extract keeps
			// the layer's order.
			if err := os.Link(filepath.Join(dir, filepath.Clean("/"+h.Linkname)), p); err != nil {
				return err
			}
			continue
		case tar.TypeReg:
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, tr); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
		default:
			continue
		}
		if err := os.Lchown(p, h.Uid, h.Gid); err != nil {
			return err
		}
		if h.Typeflag != tar.TypeSymlink {
			if err := os.Chmod(p, mode); err != nil { // after chown, which clears set-id bits anyway
				return err
			}
		}
	}
}

// Pull fetches an image back from the registry by digest.
func Pull(t *testing.T, repo string, d v1.Hash) v1.Image {
	t.Helper()
	ref, err := name.NewDigest(repo + "@" + d.String())
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(ref, remote.WithContext(t.Context()))
	if err != nil {
		t.Fatalf("pull %s: %v", ref, err)
	}
	return img
}

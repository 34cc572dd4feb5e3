package build

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/kube5s/sless/pkg/testenv"
)

// TestAssembledImageServesTheContract unpacks an assembled Python and Node
// image (pulled back from the registry by digest) and runs its entrypoint,
// as its user, in its working directory and with its environment, chrooted
// into the image's filesystem: the wrapper serves /_/health and answers
// the contract's echo fixture with the fixture handlers as the function.
// The interpreters come from this machine (its /usr bind-mounted into the
// chroot, and the Python of PATH at /opt/python), standing in for a real
// runtime base, which cannot be pulled here.
func TestAssembledImageServesTheContract(t *testing.T) {
	reg := testenv.Registry(t)
	fixtures := filepath.Join("..", "..", "..", "..", "runtimes", "fixtures", "handlers")
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal(err)
	}
	// The interpreter's real prefix (a pyenv shim is a script).
	out, err := exec.Command(python, "-c", "import sys; print(sys.base_prefix)").Output()
	if err != nil {
		t.Fatal(err)
	}
	pyPrefix := strings.TrimSpace(string(out))
	for _, tc := range []struct {
		runtime, file, entry string
	}{{"python3.11", "main.py", "main.handler"}, {"nodejs20", "index.js", "index.handler"}} {
		t.Run(tc.runtime, func(t *testing.T) {
			base := testBaseWithPath(t, reg, "/opt/python/bin:/usr/local/bin:/usr/bin:/bin")
			code := t.TempDir()
			body, err := os.ReadFile(filepath.Join(fixtures, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(code, tc.file), body, 0o644); err != nil {
				t.Fatal(err)
			}
			dest := reg + "/" + testenv.Name("acme-") + "/fixtures"
			d, err := Assemble(t.Context(), AssembleRequest{Runtime: tc.runtime, Base: base, Code: code, Destination: dest,
				SourceSHA256: strings.Repeat("ab", 32), Tenant: "test", Function: "fixtures"}, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			img := pulled(t, dest, d)
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			root := t.TempDir()
			if err := unpack(img, root); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(root, 0o755); err != nil { // the image's /, which 10001 must enter
				t.Fatal(err)
			}
			for _, l := range []string{"bin", "lib", "lib64", "sbin"} {
				if target, err := os.Readlink("/" + l); err == nil {
					os.Symlink(target, filepath.Join(root, l))
				}
			}
			for _, dir := range []string{"usr", "dev", "proc", "opt/python", "tmp"} {
				if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			os.Chmod(filepath.Join(root, "tmp"), 0o1777)
			port := freePort(t)
			env := append(cf.Config.Env, fmt.Sprintf("PORT=%d", port), "SLESS_HOST=127.0.0.1", "SLESS_ENTRYPOINT="+tc.entry,
				"SLESS_FUNCTION=fixtures", "SLESS_TENANT=test", "SLESS_WORKERS=1")
			// A private mount namespace: the bind mounts vanish with it.
			script := fmt.Sprintf(`set -e
/usr/bin/mount --make-rprivate /
/usr/bin/mount --rbind /usr %[1]s/usr
/usr/bin/mount --rbind /dev %[1]s/dev
/usr/bin/mount -t proc proc %[1]s/proc
/usr/bin/mount --rbind %[2]q %[1]s/opt/python
exec /usr/sbin/chroot --userspec=%[3]s %[1]s /usr/bin/env -C %[4]s "$@"`, root, pyPrefix, cf.Config.User, cf.Config.WorkingDir)
			args := append([]string{"-m", "--", "sh", "-c", script, "sh"}, cf.Config.Entrypoint...)
			cmd := exec.Command("unshare", args...)
			cmd.Env = env
			logs := &testenv.SyncBuffer{}
			cmd.Stdout, cmd.Stderr = logs, logs
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
			url := fmt.Sprintf("http://127.0.0.1:%d", port)
			deadline := time.Now().Add(30 * time.Second)
			for {
				res, err := http.Get(url + "/_/health")
				if err == nil {
					res.Body.Close()
					if res.StatusCode == http.StatusOK {
						break
					}
				}
				if time.Now().After(deadline) {
					t.Fatalf("the image's entrypoint never became healthy (%v); its output:\n%s", err, logs.String())
				}
				time.Sleep(100 * time.Millisecond)
			}
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, url+"/echo/sub?a=1&b=two", strings.NewReader(`{"k":[1,2]}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Custom", "v")
			req.Header.Set("X-Sless-Invocation-Id", "inv-1")
			req.Header.Set("X-Sless-Trigger", "http")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			var got map[string]any
			if err := json.NewDecoder(res.Body).Decode(&got); err != nil || res.StatusCode != 200 {
				t.Fatalf("echo: %d %v", res.StatusCode, err)
			}
			for k, want := range map[string]any{"method": "POST", "path": "/echo/sub", "invocationId": "inv-1", "function": "fixtures",
				"tenant": "test", "header": "v", "rawQuery": "a=1&b=two"} {
				if got[k] != want {
					t.Errorf("echo %s = %v, want %v", k, got[k], want)
				}
			}
		})
	}
}

// testBaseWithPath is testBase with the PATH that finds the interpreters.
func testBaseWithPath(t *testing.T, reg, path string) string {
	t.Helper()
	return testBaseEnv(t, reg, []string{"PATH=" + path})
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

// unpack writes an image's flattened filesystem into dir, with its owners.
func unpack(img v1.Image, dir string) error {
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
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, os.FileMode(h.Mode)&os.ModePerm); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.Symlink(h.Linkname, p); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&os.ModePerm)
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
	}
}

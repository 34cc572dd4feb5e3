package testenv

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
)

// PythonRuntime starts the Python wrapper (runtimesDir/python3.11) on the
// handlers in codeDir with entrypoint main.handler and the extra
// environment, its output also written to out when out is not nil; it
// waits until the wrapper answers /_/health and returns its endpoint.
// It stops with the test. When it does not become healthy in 20 s, the test
// fails with what the wrapper printed and the last health answer.
func PythonRuntime(t testing.TB, runtimesDir, codeDir string, out io.Writer, env ...string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	c := exec.Command("python3", filepath.Join(runtimesDir, string(slessv1.RuntimePython311), "runtime.py"))
	c.Env = append(append(os.Environ(), "PORT="+strconv.Itoa(port), "SLESS_HOST=127.0.0.1", "SLESS_CODE_DIR="+codeDir,
		"SLESS_ENTRYPOINT=main.handler"), env...)
	printed := &SyncBuffer{}
	c.Stdout = io.Writer(printed)
	if out != nil {
		c.Stdout = io.MultiWriter(out, printed)
	}
	c.Stderr = c.Stdout
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	ep := fmt.Sprintf("http://127.0.0.1:%d", port)
	var last string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(30 * time.Millisecond) {
		r, err := http.Get(ep + "/_/health")
		if err == nil {
			r.Body.Close()
			if r.StatusCode == 200 {
				return ep
			}
			last = r.Status
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Python runtime on %s is not healthy after 20 s (last: %s); it printed:\n%s", codeDir, last, printed.String())
		}
	}
}

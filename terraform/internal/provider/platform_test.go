package provider_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kube5s/sless/pkg/testenv"
)

// repoRoot is the repository, from this package's directory.
var repoRoot = filepath.Join("..", "..", "..")

// platform is a whole sless started by hack/dev.sh (make dev), with a state,
// database, bucket, vhost and ports of its own, as e2e/e2e_test.go starts it.
type platform struct {
	base, admin, demo string // gateway URL, admin token, the demo tenant's token
}

func startPlatform(t *testing.T) *platform {
	t.Helper()
	vhost, cleanup, err := testenv.RabbitVhost()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	state := t.TempDir()
	gw := testenv.FreeAddr(t)
	port := gw[strings.LastIndex(gw, ":")+1:]
	opsBase := testenv.FreePortBlock(t, 5)
	cmd := exec.Command("bash", filepath.Join(repoRoot, "hack", "dev.sh"))
	cmd.Env = append(os.Environ(), "SLESS_DEV_PORT="+port, fmt.Sprintf("SLESS_DEV_OPS_BASE=%d", opsBase), "SLESS_DEV_STATE="+state,
		"SLESS_DEV_DATABASE="+testenv.Name("sless_tf_"), "SLESS_DEV_BUCKET="+testenv.Name("sless-tf-"), "SLESS_DEV_RABBITMQ_URL="+vhost)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	var mu sync.Mutex
	exited := make(chan struct{})
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			mu.Lock()
			logs.WriteString(sc.Text() + "\n")
			mu.Unlock()
		}
	}()
	go func() {
		<-scanned
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			t.Error("make dev did not stop within 60s of Ctrl-C")
		}
		if t.Failed() {
			mu.Lock()
			t.Logf("make dev output (tail):\n%s", lastLines(logs.String(), 60))
			mu.Unlock()
		}
	})
	readyFile := filepath.Join(state, "ready.json")
	var r struct {
		Gateway    string `json:"gateway"`
		AdminToken string `json:"admin_token"`
		DemoToken  string `json:"demo_token"`
	}
	// make dev first waits for hack/deps.sh builds; on a failure the
	// cleanup above logs the end of its output.
	testenv.Eventually(t, 30*time.Minute, "make dev to be ready ("+readyFile+")", func() (bool, string) {
		select {
		case <-exited:
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("make dev ended before it was ready:\n%s", lastLines(logs.String(), 60))
		default:
		}
		b, err := os.ReadFile(readyFile)
		if err != nil {
			return false, err.Error()
		}
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("ready file: %v", err)
		}
		return true, ""
	})
	return &platform{base: r.Gateway, admin: r.AdminToken, demo: r.DemoToken}
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// call sends a request to the gateway and returns the status and body.
func (p *platform) call(method, path, token, body string) (int, string, error) {
	req, err := http.NewRequest(method, p.base+path, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// invoke calls a demo function synchronously.
func (p *platform) invoke(name, body string) (string, error) {
	code, out, err := p.call(http.MethodPost, "/v1/tenants/demo/functions/"+name+"/invoke", p.demo, body)
	if err != nil {
		return "", err
	}
	if code != http.StatusOK {
		return "", fmt.Errorf("invoke %s: %d %s", name, code, out)
	}
	return out, nil
}

// tofuPath is the OpenTofu binary the tests drive: TF_ACC_TERRAFORM_PATH
// when set, else the one hack/deps.sh builds (once) into the cache.
func tofuPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("TF_ACC_TERRAFORM_PATH"); p != "" {
		return p
	}
	out, err := exec.Command("bash", filepath.Join(repoRoot, "hack", "deps.sh"), "tofu").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("hack/deps.sh tofu: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("hack/deps.sh tofu: %v", err)
	}
	return strings.TrimSpace(string(out))
}

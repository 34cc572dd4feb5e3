package provider_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kube5s/sless/pkg/testenv"
)

// testExample applies examples/terraform/main.tf as a user would: the
// provider binary built and found through the CLI configuration's
// dev_overrides (no registry), configured only by SLESS_URL, SLESS_TOKEN
// and SLESS_TENANT, then a second plan changes nothing, and destroy
// removes everything. It covers what the other steps do not: the
// environment configuration, a Node function and a queue trigger.
func testExample(t *testing.T, p *platform) {
	plugins := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(plugins, "terraform-provider-sless"), ".")
	build.Dir = filepath.Join(repoRoot, "terraform")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the provider: %v\n%s", err, out)
	}
	rc := filepath.Join(t.TempDir(), "tofurc")
	if err := os.WriteFile(rc, fmt.Appendf(nil, "provider_installation {\n  dev_overrides {\n    \"kube5s/sless\" = %q\n  }\n  direct {}\n}\n", plugins), 0o644); err != nil {
		t.Fatal(err)
	}
	// The example with the two example functions beside it, as in the repository.
	work := t.TempDir()
	for _, d := range []string{"terraform", "hello-node", "simple-python"} {
		if out, err := exec.Command("cp", "-r", filepath.Join(repoRoot, "examples", d), filepath.Join(work, d)).CombinedOutput(); err != nil {
			t.Fatalf("copy examples/%s: %v %s", d, err, out)
		}
	}
	dir := filepath.Join(work, "terraform")
	tofu := func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(tofuPath(t), args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "TF_CLI_CONFIG_FILE="+rc, "TF_IN_AUTOMATION=1", "SLESS_URL="+p.base, "SLESS_TOKEN="+p.demo, "SLESS_TENANT=demo")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("tofu %s: %v", strings.Join(args, " "), err)
		}
		t.Logf("$ tofu %s\n%s", strings.Join(args, " "), out.String())
		return out.String(), cmd.ProcessState.ExitCode()
	}
	destroyed := false
	t.Cleanup(func() {
		if !destroyed {
			tofu("destroy", "-auto-approve", "-input=false", "-no-color")
		}
	})

	if out, code := tofu("apply", "-auto-approve", "-input=false", "-no-color"); code != 0 || !strings.Contains(out, "Apply complete! Resources: 5 added") {
		t.Fatalf("tofu apply of the example: exit %d", code)
	}
	url, code := tofu("output", "-raw", "hello_url")
	if code != 0 || !strings.HasPrefix(url, p.base+"/fn/demo/tf-hello") {
		t.Fatalf("output hello_url: %q (exit %d)", url, code)
	}
	testenv.Eventually(t, 30*time.Second, "GET "+url+" to answer hello, tofu", func() (bool, string) {
		code, b, err := p.call("GET", strings.TrimPrefix(url, p.base)+"?name=tofu", "", "")
		return err == nil && code == 200 && strings.Contains(b, "hello, tofu"), fmt.Sprintf("%d %q %v", code, b, err)
	})
	for _, tr := range []string{"tf-hello", "tf-reverse-hourly", "tf-reverse-queue"} {
		if code, b, err := p.call("GET", "/v1/tenants/demo/triggers/"+tr, p.demo, ""); code != 200 || strings.Contains(b, `"phase":"Failed"`) {
			t.Errorf("trigger %s: %d %s %v", tr, code, b, err)
		}
	}
	if _, code := tofu("plan", "-detailed-exitcode", "-input=false", "-no-color"); code != 0 {
		t.Errorf("a second plan of the example: exit %d, want 0 (no changes)", code)
	}
	if out, code := tofu("destroy", "-auto-approve", "-input=false", "-no-color"); code != 0 || !strings.Contains(out, "Destroy complete! Resources: 5 destroyed") {
		t.Fatalf("tofu destroy of the example: exit %d", code)
	}
	destroyed = true
	for _, fn := range []string{"tf-hello", "tf-reverse"} {
		if code, _, _ := p.call("GET", "/v1/tenants/demo/functions/"+fn, p.demo, ""); code != 404 {
			t.Errorf("function %s answers %d after destroy", fn, code)
		}
	}
}

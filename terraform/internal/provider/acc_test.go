package provider_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/kube5s/sless/pkg/archive"
	slessclient "github.com/kube5s/sless/pkg/client"
	"github.com/kube5s/sless/pkg/testenv"
	"github.com/kube5s/sless/terraform/internal/provider"
)

// TestAcc drives the provider with a real OpenTofu binary against a whole
// platform started by make dev. The provider runs in this process: the
// test framework serves it and hands OpenTofu its address
// (TF_REATTACH_PROVIDERS), so no registry is asked for it.
func TestAcc(t *testing.T) {
	testenv.SteadyServers(t)
	if os.Getenv("TF_ACC") == "" {
		t.Fatal("the acceptance tests need TF_ACC=1 (make test sets it) and the servers of hack/deps.sh up")
	}
	setupTofu(t)
	p := startPlatform(t)
	t.Run("function", func(t *testing.T) { testFunctionLifecycle(t, p) })
	t.Run("failed build", func(t *testing.T) { testFailedBuild(t, p) })
	t.Run("failed update", func(t *testing.T) { testFailedUpdate(t, p) })
	t.Run("create timeout", func(t *testing.T) { testCreateTimeout(t, p) })
	t.Run("trigger and job", func(t *testing.T) { testTriggerAndJob(t, p) })
	t.Run("tenant and token", func(t *testing.T) { testTenantAndToken(t, p) })
	t.Run("the example, with dev_overrides", func(t *testing.T) { testExample(t, p) })
}

// setupTofu points the test framework at OpenTofu: its binary, the
// registry host and namespace OpenTofu gives an unqualified provider
// ("sless" is registry.opentofu.org/hashicorp/sless there), and a CLI
// configuration of its own (none of the machine's).
func setupTofu(t *testing.T) {
	t.Setenv("TF_ACC_TERRAFORM_PATH", tofuPath(t))
	t.Setenv("TF_ACC_PROVIDER_HOST", "registry.opentofu.org")
	t.Setenv("TF_ACC_PROVIDER_NAMESPACE", "hashicorp")
	cfg := filepath.Join(t.TempDir(), "tofurc")
	if err := os.WriteFile(cfg, []byte("# the provider is served by the test process (TF_REATTACH_PROVIDERS); no registry is used\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TF_CLI_CONFIG_FILE", cfg)
	t.Setenv("TF_IN_AUTOMATION", "1")
}

func factories() map[string]func() (tfprotov6.ProviderServer, error) {
	return map[string]func() (tfprotov6.ProviderServer, error){
		"sless": providerserver.NewProtocol6WithError(provider.New("test", func(string) string { return "" })()),
	}
}

func providerBlock(p *platform, token string) string {
	return fmt.Sprintf("provider \"sless\" {\n  url = %q\n  token = %q\n  tenant = \"demo\"\n}\n", p.base, token)
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func functionConfig(p *platform, name, dir string) string {
	return providerBlock(p, p.demo) + fmt.Sprintf(`
resource "sless_function" "f" {
  name        = %q
  runtime     = "python3.11"
  entrypoint  = "main.handler"
  memory_mb   = 128
  timeout_sec = 10
  max_replicas       = 3
  target_concurrency = 5
  scaling_schedules = [{
    cron             = "0 9 * * 1-5"
    time_zone        = "Europe/Berlin"
    duration_seconds = 32400
    min_replicas     = 2
  }]
  env_vars    = { GREETING = "hello" }
  source_dir  = %q
}
`, name, dir)
}

// splitOK is 90 % on version 1 and 10 % on latest, tagged canary.
const splitOK = `
  traffic = [
    { version = 1, percent = 90 },
    { latest = true, percent = 10, tag = "canary" },
  ]`

// trafficConfig is functionConfig with the traffic list and the version
// data sources of version 1 and latest (read after the function's apply).
func trafficConfig(p *platform, name, dir, traffic string) string {
	return strings.Replace(functionConfig(p, name, dir), "\n  source_dir", traffic+"\n  source_dir", 1) + `
data "sless_function_version" "v1" {
  function   = sless_function.f.name
  number     = 1
  depends_on = [sless_function.f]
}

data "sless_function_version" "latest" {
  function   = sless_function.f.name
  depends_on = [sless_function.f]
}
`
}

// checkSplit reads the function from the API: its traffic (as JSON) and
// its effective split, status.serving without the versions that drain
// ("v1=90 v2=10[canary]").
func checkSplit(p *platform, name, traffic, serving string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		code, body, err := p.call(http.MethodGet, "/v1/tenants/demo/functions/"+name, p.demo, "")
		if err != nil || code != 200 {
			return fmt.Errorf("GET function %s: %d %s %v", name, code, body, err)
		}
		var f slessclient.Function
		if err := json.Unmarshal([]byte(body), &f); err != nil {
			return err
		}
		got, _ := json.Marshal(f.Traffic)
		var split []string
		for _, s := range deref(f.Status.Serving) {
			if deref(s.Draining) {
				continue // a version that left the split finishes its work
			}
			e := fmt.Sprintf("v%d=%d", s.Version, s.Percent)
			if s.Tags != nil {
				e += "[" + strings.Join(*s.Tags, ",") + "]"
			}
			if !s.Ready {
				e += "(not ready)"
			}
			split = append(split, e)
		}
		if string(got) != traffic || strings.Join(split, " ") != serving {
			return fmt.Errorf("function %s: traffic %s serving %q, want %s and %q", name, got, strings.Join(split, " "), traffic, serving)
		}
		return nil
	}
}

func deref[T any](p *T) T {
	var v T
	if p != nil {
		v = *p
	}
	return v
}

func pyHandler(version string) string {
	return "import os\n\ndef handler(event, context):\n    return os.environ['GREETING'] + ' from " + version + "'\n"
}

// A function from a directory is Ready and answers; planning again
// changes nothing; a changed file is one update with a new build; it
// imports by tenant/name; destroy waits until it is gone.
func testFunctionLifecycle(t *testing.T, p *platform) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"main.py": pyHandler("v1")})
	packed, err := archive.Pack(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	sum1 := packed.SHA256
	name := testenv.Name("tf-fn-")
	var build1 string
	var back time.Time
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories(),
		CheckDestroy:             checkGone(p, "functions", name),
		Steps: []resource.TestStep{
			{
				Config: functionConfig(p, name, dir),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("sless_function.f", plancheck.ResourceActionCreate),
					plancheck.ExpectKnownValue("sless_function.f", tfjsonpath.New("source_sha256"), knownvalue.StringExact(sum1)),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("sless_function.f", "phase", "Ready"),
					resource.TestCheckResourceAttr("sless_function.f", "id", "demo/"+name),
					resource.TestCheckResourceAttr("sless_function.f", "source_sha256", sum1),
					resource.TestCheckResourceAttr("sless_function.f", "cpu_millis", "100"), // the platform's default
					resource.TestCheckResourceAttr("sless_function.f", "max_replicas", "3"),
					resource.TestCheckResourceAttr("sless_function.f", "target_concurrency", "5"),
					resource.TestCheckResourceAttr("sless_function.f", "scale_down_delay_seconds", "0"), // 0: the scaler's default
					resource.TestCheckNoResourceAttr("sless_function.f", "min_replicas"),                // unset: the platform's default
					resource.TestCheckResourceAttr("sless_function.f", "scaling_schedules.0.cron", "0 9 * * 1-5"),
					resource.TestCheckResourceAttr("sless_function.f", "scaling_schedules.0.time_zone", "Europe/Berlin"),
					resource.TestCheckResourceAttr("sless_function.f", "scaling_schedules.0.min_replicas", "2"),
					resource.TestCheckResourceAttr("sless_function.f", "latest_version", "1"),
					resource.TestCheckResourceAttrWith("sless_function.f", "last_build_id", func(v string) error {
						if v == "" {
							return fmt.Errorf("no build recorded")
						}
						build1 = v
						return nil
					}),
					checkInvoke(p, name, "hello from v1"),
				),
			},
			{
				// The same configuration plans nothing.
				Config:   functionConfig(p, name, dir),
				PlanOnly: true,
			},
			{
				// A changed file is one in-place update and a new build.
				PreConfig: func() { writeFiles(t, dir, map[string]string{"main.py": pyHandler("v2")}) },
				Config:    functionConfig(p, name, dir),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("sless_function.f", plancheck.ResourceActionUpdate),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("sless_function.f", "phase", "Ready"),
					resource.TestCheckResourceAttrWith("sless_function.f", "source_sha256", func(v string) error {
						if v == sum1 {
							return fmt.Errorf("source_sha256 is still %s after the file changed", v)
						}
						return nil
					}),
					resource.TestCheckResourceAttrWith("sless_function.f", "last_build_id", func(v string) error {
						if v == "" || v == build1 {
							return fmt.Errorf("last_build_id %q: want a build other than %q", v, build1)
						}
						return nil
					}),
					resource.TestCheckResourceAttr("sless_function.f", "latest_version", "2"),
					checkInvoke(p, name, "hello from v2"),
				),
			},
			{
				// A split over v1 and v2 (latest), with a tag: the apply
				// ends once the platform serves it, and both versions read.
				Config: trafficConfig(p, name, dir, splitOK),
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("sless_function.f", "traffic.#", "2"),
					resource.TestCheckResourceAttr("sless_function.f", "traffic.0.version", "1"),
					resource.TestCheckResourceAttr("sless_function.f", "traffic.0.percent", "90"),
					resource.TestCheckResourceAttr("sless_function.f", "traffic.1.latest", "true"),
					resource.TestCheckResourceAttr("sless_function.f", "traffic.1.tag", "canary"),
					resource.TestCheckResourceAttr("sless_function.f", "latest_version", "2"),
					checkSplit(p, name, `[{"percent":90,"version":1},{"latest":true,"percent":10,"tag":"canary"}]`, "v1=90 v2=10[canary]"),
					resource.TestCheckResourceAttr("data.sless_function_version.v1", "number", "1"),
					resource.TestCheckResourceAttr("data.sless_function_version.v1", "id", "demo/"+name+"/1"),
					resource.TestCheckResourceAttr("data.sless_function_version.v1", "latest", "false"),
					resource.TestCheckResourceAttr("data.sless_function_version.v1", "source_sha256", sum1),
					resource.TestCheckResourceAttr("data.sless_function_version.v1", "runtime", "python3.11"),
					resource.TestCheckResourceAttr("data.sless_function_version.v1", "memory_mb", "128"),
					resource.TestCheckResourceAttr("data.sless_function_version.v1", "env.0", "GREETING"),
					resource.TestCheckResourceAttr("data.sless_function_version.v1", "serving", "true"),
					resource.TestCheckResourceAttr("data.sless_function_version.v1", "percent", "90"),
					resource.TestCheckResourceAttr("data.sless_function_version.v1", "ready", "true"),
					resource.TestCheckResourceAttr("data.sless_function_version.v1", "tags.#", "0"),
					resource.TestCheckResourceAttrWith("data.sless_function_version.v1", "build_id", func(v string) error {
						if v != build1 {
							return fmt.Errorf("version 1's build_id %q, want the first build %q", v, build1)
						}
						return nil
					}),
					resource.TestCheckResourceAttr("data.sless_function_version.latest", "number", "2"),
					resource.TestCheckResourceAttr("data.sless_function_version.latest", "latest", "true"),
					resource.TestCheckResourceAttr("data.sless_function_version.latest", "percent", "10"),
					resource.TestCheckResourceAttr("data.sless_function_version.latest", "tags.0", "canary"),
					resource.TestCheckResourceAttrPair("data.sless_function_version.latest", "source_sha256", "sless_function.f", "source_sha256"),
					resource.TestCheckResourceAttrPair("data.sless_function_version.latest", "build_id", "sless_function.f", "last_build_id"),
					func(*terraform.State) error {
						// The tag routes to the version it names.
						code, body, err := p.call(http.MethodPost, "/v1/tenants/demo/functions/"+name+"@canary/invoke", p.demo, "")
						if err != nil || code != 200 || !strings.Contains(body, "hello from v2") {
							return fmt.Errorf("invoke %s@canary: %d %q %v", name, code, body, err)
						}
						return nil
					},
				),
			},
			// Read back, the split plans nothing, and it imports.
			{Config: trafficConfig(p, name, dir, splitOK), PlanOnly: true},
			{
				ResourceName: "sless_function.f", ImportState: true, ImportStateId: "demo/" + name,
				ImportStateVerify: true, ImportStateVerifyIgnore: []string{"source_dir", "timeouts"},
			},
			{
				// A split the API refuses fails naming the problem, and
				// changes nothing: the state and the platform keep 90/10.
				Config:      trafficConfig(p, name, dir, strings.Replace(splitOK, "percent = 90", "percent = 80", 1)),
				ExpectError: regexp.MustCompile(`(?s)The platform refused the traffic split.*traffic:\s+the\s+percents\s+sum\s+to\s+90,\s+not\s+100`),
			},
			{
				PreConfig: func() {
					if err := checkSplit(p, name, `[{"percent":90,"version":1},{"latest":true,"percent":10,"tag":"canary"}]`, "v1=90 v2=10[canary]")(nil); err != nil {
						t.Errorf("after the refused split: %v", err)
					}
				},
				Config: trafficConfig(p, name, dir, splitOK), PlanOnly: true,
			},
			{
				// A split changed outside Terraform shows as drift.
				PreConfig: func() {
					code, body, err := p.call(http.MethodPut, "/v1/tenants/demo/functions/"+name+"/traffic", p.demo, `{"traffic":[{"latest":true,"percent":100}]}`)
					if err != nil || code != 200 {
						t.Fatalf("PUT traffic: %d %s %v", code, body, err)
					}
				},
				Config: trafficConfig(p, name, dir, splitOK), PlanOnly: true, ExpectNonEmptyPlan: true,
			},
			{
				// Back to a digest built before: no build runs again (the
				// builder answers from its record), so v1 serves at once.
				PreConfig: func() { writeFiles(t, dir, map[string]string{"main.py": pyHandler("v1")}); back = time.Now() },
				Config:    functionConfig(p, name, dir),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("sless_function.f", plancheck.ResourceActionUpdate),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("sless_function.f", "source_sha256", sum1),
					resource.TestCheckResourceAttrWith("sless_function.f", "last_build_id", func(v string) error {
						if v != build1 { // build1 is known only once the first step ran
							return fmt.Errorf("last_build_id %q: want the first build %q again", v, build1)
						}
						return nil
					}),
					// The template is version 1's again: version 1 is latest,
					// and no version is published.
					resource.TestCheckResourceAttr("sless_function.f", "latest_version", "1"),
					// Without a traffic list the split is the platform's
					// default again.
					resource.TestCheckNoResourceAttr("sless_function.f", "traffic.#"),
					checkSplit(p, name, "null", "v1=100"),
					checkInvoke(p, name, "hello from v1"),
					func(*terraform.State) error {
						t.Logf("going back to a built digest: the apply took %s", time.Since(back).Round(time.Millisecond))
						return nil
					},
				),
			},
			{
				ResourceName:            "sless_function.f",
				ImportState:             true,
				ImportStateId:           "demo/" + name,
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"source_dir", "timeouts"},
			},
		},
	})
}

// A build that fails is an apply error that says why (the builder's reason
// and the end of the build log).
//
// The code comes from source_zip here (a zip made beforehand), the other
// steps' from source_dir.
func testFailedBuild(t *testing.T, p *platform) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"main.py": "def handler(event, context)\n    return 1\n"}) // no colon
	packed, err := archive.Pack(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	zip := filepath.Join(t.TempDir(), "code.zip")
	if err := os.WriteFile(zip, packed.Bytes, 0o644); err != nil {
		t.Fatal(err)
	}
	name := testenv.Name("tf-bad-")
	config := strings.Replace(functionConfig(p, name, dir), fmt.Sprintf("source_dir  = %q", dir), fmt.Sprintf("source_zip  = %q", zip), 1)
	if !strings.Contains(config, "source_zip") {
		t.Fatalf("no source_zip in the configuration:\n%s", config)
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories(),
		CheckDestroy:             checkGone(p, "functions", name),
		Steps: []resource.TestStep{{
			Config:      config,
			ExpectError: regexp.MustCompile(`(?s)the build failed: SyntaxError.*The end of build \S+'s log:\n.*main\.py`),
		}},
	})
}

// An update whose build fails is an apply error as soon as the build
// failed, with the reason and the end of the log, while the previous
// version still serves; the state says so, and the next plan shows the
// update again. Back to the code that serves, the apply is clean.
func testFailedUpdate(t *testing.T, p *platform) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"main.py": pyHandler("v1")})
	name := testenv.Name("tf-upd-")
	var started time.Time
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories(),
		CheckDestroy:             checkGone(p, "functions", name),
		Steps: []resource.TestStep{
			{
				Config: functionConfig(p, name, dir),
				Check:  checkInvoke(p, name, "hello from v1"),
			},
			{
				PreConfig: func() {
					writeFiles(t, dir, map[string]string{"main.py": "def handler(event, context)\n    return 1\n"}) // no colon
					started = time.Now()
				},
				Config:      functionConfig(p, name, dir),
				ExpectError: regexp.MustCompile(`(?s)the build failed: SyntaxError.*The end of build \S+'s log:\n.*main\.py.*still\s+serves`),
			},
			{
				// The state is true: the failed digest does not serve, so
				// the same configuration plans the update again.
				PreConfig: func() {
					t.Logf("the failed update ended %s after the apply began", time.Since(started).Round(time.Millisecond))
				},
				Config:             functionConfig(p, name, dir),
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
			},
			{
				// Back to v1, which never stopped serving.
				PreConfig: func() { writeFiles(t, dir, map[string]string{"main.py": pyHandler("v1")}) },
				Config:    functionConfig(p, name, dir),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("sless_function.f", plancheck.ResourceActionUpdate),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("sless_function.f", "phase", "Ready"),
					checkInvoke(p, name, "hello from v1"),
				),
			},
			{Config: functionConfig(p, name, dir), PlanOnly: true},
		},
	})
}

// A create that outlasts timeouts.create is an error that says so; the
// function it made stays in the state and is destroyed with it.
func testCreateTimeout(t *testing.T, p *platform) {
	dir := t.TempDir()
	// The handler's module takes a minute to import, so the function cannot
	// be Ready within the 5 s allowed (its create and upload take far less).
	writeFiles(t, dir, map[string]string{"main.py": "import time\ntime.sleep(60)\n\n" + pyHandler("slow")})
	name := testenv.Name("tf-to-")
	config := strings.Replace(functionConfig(p, name, dir), "  source_dir", "  timeouts    = { create = \"5s\" }\n  source_dir", 1)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories(),
		CheckDestroy:             checkGone(p, "functions", name),
		Steps: []resource.TestStep{{
			Config:      config,
			ExpectError: regexp.MustCompile(`(?s)(did not become ready|Cannot upload).*deadline exceeded`),
		}},
	})
}

// An http trigger routes to the function; a job is created with its run_id.
func testTriggerAndJob(t *testing.T, p *platform) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"main.py": pyHandler("trigger")})
	name := testenv.Name("tf-tr-")
	route := "/" + name
	config := functionConfig(p, name, dir) + fmt.Sprintf(`
resource "sless_trigger" "web" {
  name     = %[1]q
  function = sless_function.f.name
  type     = "http"
  http = {
    path    = %[2]q
    methods = ["GET", "POST"]
    auth    = "none"
  }
}

resource "sless_trigger" "tick" {
  name     = "%[1]s-cron"
  function = sless_function.f.name
  type     = "cron"
  cron = {
    schedule         = "@every 1h"
    payload          = jsonencode({ from = "cron" })
    pre_warm_seconds = "auto"
  }
}

resource "sless_job" "once" {
  name     = "%[1]s-job"
  function = sless_function.f.name
  run_id   = 1
  payload  = jsonencode({ n = 1 })
}

data "sless_function" "read" {
  name = sless_function.f.name
}
`, name, route)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories(),
		CheckDestroy: resource.ComposeAggregateTestCheckFunc(checkGone(p, "functions", name), checkGone(p, "triggers", name),
			checkGone(p, "triggers", name+"-cron"), checkGone(p, "jobs", name+"-job")),
		Steps: []resource.TestStep{
			{
				Config: config,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("sless_trigger.web", "enabled", "true"),
					resource.TestCheckResourceAttr("sless_trigger.tick", "cron.pre_warm_seconds", "auto"),
					resource.TestCheckResourceAttr("sless_job.once", "run_id", "1"),
					resource.TestCheckResourceAttr("data.sless_function.read", "phase", "Ready"),
					resource.TestCheckResourceAttrPair("data.sless_function.read", "source_sha256", "sless_function.f", "source_sha256"),
					func(*terraform.State) error {
						code, body, err := p.call("GET", "/fn/demo"+route, "", "")
						if err != nil || code != 200 || !strings.Contains(body, "hello from trigger") {
							return fmt.Errorf("GET /fn/demo%s: %d %q %v", route, code, body, err)
						}
						return nil
					},
				),
			},
			{Config: config, PlanOnly: true},
			{ResourceName: "sless_trigger.web", ImportState: true, ImportStateId: "demo/" + name, ImportStateVerify: true},
			{ResourceName: "sless_job.once", ImportState: true, ImportStateId: "demo/" + name + "-job", ImportStateVerify: true,
				ImportStateVerifyIgnore: []string{"phase", "last_run_id", "invocation_id"}},
		},
	})
}

// The admin creates a tenant and a token; the token reads its tenant.
func testTenantAndToken(t *testing.T, p *platform) {
	name := testenv.Name("tf-t-")
	var token string
	config := fmt.Sprintf("provider \"sless\" {\n  url = %q\n  token = %q\n}\n", p.base, p.admin) + fmt.Sprintf(`
resource "sless_tenant" "t" {
  name          = %q
  display_name  = "made by tofu"
  max_functions = 5
}

resource "sless_tenant_token" "ci" {
  tenant = sless_tenant.t.name
  name   = "ci"
}

data "sless_tenant" "t" {
  name = sless_tenant.t.name
}
`, name)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories(),
		Steps: []resource.TestStep{
			{
				Config: config,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("sless_tenant.t", "max_functions", "5"),
					resource.TestCheckResourceAttr("sless_tenant.t", "namespace", "sless-fn-"+name),
					resource.TestCheckResourceAttr("data.sless_tenant.t", "display_name", "made by tofu"),
					resource.TestCheckResourceAttrWith("sless_tenant_token.ci", "token", func(v string) error {
						token = v
						code, body, err := p.call("GET", "/v1/tenants/"+name, v, "")
						if err != nil || code != 200 {
							return fmt.Errorf("the issued token cannot read its tenant: %d %s %v", code, body, err)
						}
						code, _, _ = p.call("GET", "/v1/tenants/demo", v, "")
						if code != 403 {
							return fmt.Errorf("the issued token reads another tenant: %d", code)
						}
						return nil
					}),
				),
			},
			{Config: config, PlanOnly: true},
			{ResourceName: "sless_tenant.t", ImportState: true, ImportStateId: name, ImportStateVerify: true},
		},
		CheckDestroy: func(*terraform.State) error {
			if code, _, _ := p.call("GET", "/v1/tenants/"+name, p.admin, ""); code != 404 {
				return fmt.Errorf("tenant %s answers %d after destroy", name, code)
			}
			if code, _, _ := p.call("GET", "/v1/tenants/"+name, token, ""); code != 401 && code != 403 && code != 404 {
				return fmt.Errorf("the revoked token still answers %d", code)
			}
			return nil
		},
	})
}

// checkInvoke calls the function once, right after the apply: an apply
// reports success only once the gateway routes to the new code, so the
// first call must answer want.
func checkInvoke(p *platform, name, want string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		out, err := p.invoke(name, "")
		if err != nil || !strings.Contains(out, want) {
			return fmt.Errorf("the first invoke of %s after the apply answered %q (%v), want %q", name, out, err, want)
		}
		return nil
	}
}

func checkGone(p *platform, kind, name string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		code, body, err := p.call("GET", "/v1/tenants/demo/"+kind+"/"+name, p.demo, "")
		if err != nil {
			return err
		}
		if code != 404 {
			return fmt.Errorf("%s %s answers %d after destroy: %s", kind, name, code, body)
		}
		return nil
	}
}

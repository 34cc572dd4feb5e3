package provider_test

import (
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
)

// TestValidation: OpenTofu refuses configurations the platform would
// refuse, at plan time, without a platform (nothing is applied).
func TestValidation(t *testing.T) {
	setupTofu(t)
	provider := "provider \"sless\" {\n  url = \"http://127.0.0.1:1\"\n  tenant = \"demo\"\n}\n"
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"main.py": "def handler(e, c):\n    return 1\n"})
	cases := []struct {
		name, config, want string
	}{
		{"a trigger's block must match its type", `
resource "sless_trigger" "t" {
  name     = "t"
  function = "f"
  type     = "cron"
  http     = { path = "/x" }
}`, `(?s)Unexpected http block.*Missing cron block|Missing cron block.*Unexpected http block`},
		{"source_dir and source_zip exclude each other", `
resource "sless_function" "f" {
  name       = "f"
  runtime    = "python3.11"
  entrypoint = "main.handler"
  source_dir = "` + dir + `"
  source_zip = "` + dir + `/x.zip"
}`, `(?s)source_dir.*source_zip`},
		{"source_dir must be a directory", `
resource "sless_function" "f" {
  name       = "f"
  runtime    = "python3.11"
  entrypoint = "main.handler"
  source_dir = "` + dir + `/missing"
}`, `is not a readable directory`},
		{"names are DNS labels", `
resource "sless_function" "f" {
  name       = "Not_A_Label"
  runtime    = "python3.11"
  entrypoint = "main.handler"
  source_dir = "` + dir + `"
}`, `DNS-1123 label`},
		{"runtimes are the platform's", `
resource "sless_function" "f" {
  name       = "f"
  runtime    = "ruby"
  entrypoint = "main.handler"
  source_dir = "` + dir + `"
}`, `python3\.11`},
		{"a traffic entry names a version or latest, not both", `
resource "sless_function" "f" {
  name       = "f"
  runtime    = "python3.11"
  entrypoint = "main.handler"
  source_dir = "` + dir + `"
  traffic = [{ version = 1, latest = true, percent = 100 }]
}`, `traffic\[0\] names both version 1 and latest`},
		{"a traffic entry names a version or latest", `
resource "sless_function" "f" {
  name       = "f"
  runtime    = "python3.11"
  entrypoint = "main.handler"
  source_dir = "` + dir + `"
  traffic = [{ version = 1, percent = 90 }, { latest = false, percent = 10 }]
}`, `traffic\[1\] names neither a version nor latest`},
		{"a traffic percent is 0..100", `
resource "sless_function" "f" {
  name       = "f"
  runtime    = "python3.11"
  entrypoint = "main.handler"
  source_dir = "` + dir + `"
  traffic = [{ latest = true, percent = 101 }]
}`, `(?s)percent.*between 0 and 100`},
		{"traffic is omitted, not empty", `
resource "sless_function" "f" {
  name       = "f"
  runtime    = "python3.11"
  entrypoint = "main.handler"
  source_dir = "` + dir + `"
  traffic = []
}`, `(?s)traffic.*at least 1`},
	}
	// The same provider plans a valid function and split (the refusals
	// above are not a provider that refuses everything; the sum and the
	// versions are the API's to judge, at apply).
	resource.UnitTest(t, resource.TestCase{
		ProtoV6ProviderFactories: factories(),
		Steps: []resource.TestStep{{
			Config: provider + `
resource "sless_function" "f" {
  name       = "f"
  runtime    = "python3.11"
  entrypoint = "main.handler"
  source_dir = "` + dir + `"
  traffic = [
    { version = 1, latest = false, percent = 90, tag = "stable" },
    { latest = true, percent = 10 },
  ]
}`, PlanOnly: true, ExpectNonEmptyPlan: true,
		}},
	})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resource.UnitTest(t, resource.TestCase{
				ProtoV6ProviderFactories: factories(),
				Steps: []resource.TestStep{{
					Config: provider + c.config, PlanOnly: true, ExpectError: regexp.MustCompile(c.want),
				}},
			})
		})
	}
}

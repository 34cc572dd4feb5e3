package provider

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"

	slessclient "github.com/kube5s/sless/pkg/client"
)

// TestRequestBodies pins what the models send as pkg/client's types: the
// fields a configuration leaves out are omitted, as the API's defaults
// apply to them, except the env_vars of a PUT, which replaces them.
func TestRequestBodies(t *testing.T) {
	ctx := t.Context()
	fn := functionModel{
		Name: types.StringValue("f"), Runtime: types.StringValue("python3.11"), Entrypoint: types.StringValue("main.handler"),
		MemoryMB: types.Int64Value(256), CPUMillis: types.Int64Null(), TimeoutSec: types.Int64Unknown(), Concurrency: types.Int64Null(),
		MinReplicas: types.Int64Null(), MaxReplicas: types.Int64Null(), AllowSourceBuilds: types.BoolUnknown(),
		TargetConcurrency: types.Int64Null(), ScaleDownDelay: types.Int64Null(), MaxBuffered: types.Int64Null(),
		EnvVars: types.MapNull(types.StringType), SecretEnvVars: types.MapNull(secretRefType),
	}
	withEnv := fn
	withEnv.EnvVars = types.MapValueMust(types.StringType, map[string]attr.Value{"A": types.StringValue("1")})
	withEnv.AllowSourceBuilds = types.BoolValue(true)
	cron := triggerModel{
		Name: types.StringValue("t"), Function: types.StringValue("f"), Type: types.StringValue("cron"), Enabled: types.BoolUnknown(),
		Cron: &cronModel{Schedule: types.StringValue("@hourly"), TimeZone: types.StringUnknown(), ConcurrencyPolicy: types.StringNull(),
			StartingDeadlineSeconds: types.Int64Unknown(), Payload: types.StringNull()},
	}
	http := triggerModel{
		Name: types.StringValue("h"), Function: types.StringValue("f"), Type: types.StringValue("http"), Enabled: types.BoolValue(false),
		HTTP: &httpModel{Path: types.StringValue("/x"), Auth: types.StringValue("none"),
			Methods: types.ListValueMust(types.StringType, []attr.Value{types.StringValue("GET")})},
	}
	job := jobModel{
		Name: types.StringValue("j"), Function: types.StringValue("f"), RunID: types.Int64Value(3), Payload: types.StringValue(`{"n": 1}`),
		TimeoutSec: types.Int64Null(), MaxRetries: types.Int64Null(),
	}
	tenant := tenantModel{
		Name: types.StringValue("acme"), DisplayName: types.StringNull(), MaxFunctions: types.Int64Value(5), MaxPods: types.Int64Unknown(),
		CPUMillis: types.Int64Unknown(), MemoryMB: types.Int64Unknown(), InvocationsPerSecond: types.Int64Unknown(), ConcurrentBuilds: types.Int64Unknown(),
		MaxConcurrentInvocations: types.Int64Unknown(), InternetEgress: types.BoolValue(false), DeniedEgressCIDRs: types.ListNull(types.StringType),
	}
	var diags diag.Diagnostics
	cases := []struct {
		name string
		body any
		want string
	}{
		{"create function", fn.input(ctx, &diags),
			`{"entrypoint":"main.handler","memory_mb":256,"name":"f","runtime":"python3.11"}`},
		{"replace function", replacement(fn.input(ctx, &diags)),
			`{"entrypoint":"main.handler","env_vars":{},"memory_mb":256,"runtime":"python3.11"}`},
		{"replace function with env", replacement(withEnv.input(ctx, &diags)),
			`{"allow_source_builds":true,"entrypoint":"main.handler","env_vars":{"A":"1"},"memory_mb":256,"runtime":"python3.11"}`},
		{"create cron trigger", cron.input(ctx, &diags),
			`{"cron":{"schedule":"@hourly"},"function":"f","name":"t","type":"cron"}`},
		{"replace http trigger", triggerReplacement(http.input(ctx, &diags)),
			`{"enabled":false,"function":"f","http":{"auth":"none","methods":["GET"],"path":"/x"},"type":"http"}`},
		{"replace job", jobReplacement(job.input(&diags)),
			`{"function":"f","payload":{"n":1},"run_id":3}`},
		{"create tenant", tenant.input(ctx, &diags),
			`{"name":"acme","network":{"internet_egress":false},"quotas":{"max_functions":5}}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := json.Marshal(c.body)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Errorf("body:\n got %s\nwant %s", got, c.want)
			}
		})
	}
	if diags.HasError() {
		t.Fatal(diags)
	}
}

// TestJSONValue: a payload the server sends back as the same document
// keeps the configured text, so that the plan stays empty.
func TestJSONValue(t *testing.T) {
	var diags diag.Diagnostics
	var doc any
	if err := json.Unmarshal([]byte(`{"b":[1,2],"a":"x"}`), &doc); err != nil {
		t.Fatal(err)
	}
	configured := types.StringValue("{\n  \"a\": \"x\",\n  \"b\": [1, 2]\n}")
	if got := jsonValue(configured, doc, &diags); !got.Equal(configured) {
		t.Errorf("same document: got %s, want the configured text", got)
	}
	if got, want := jsonValue(types.StringValue(`{"a":"y"}`), doc, &diags), types.StringValue(`{"a":"x","b":[1,2]}`); !got.Equal(want) {
		t.Errorf("changed document: got %s, want %s", got, want)
	}
	if got := jsonValue(types.StringNull(), nil, &diags); !got.IsNull() {
		t.Errorf("no document: got %s, want null", got)
	}
	if diags.HasError() {
		t.Fatal(diags)
	}
}

// TestTrafficBody pins the traffic a configuration sends (PUT .../traffic)
// and reads back: the entries in order, latest and tag only when set; a
// read that says the same split keeps the configured value (latest =
// false plans nothing), one that differs is the API's (drift), and none
// is null (the platform's default).
func TestTrafficBody(t *testing.T) {
	ctx := t.Context()
	var diags diag.Diagnostics
	entry := func(version, latest, percent, tag attr.Value) attr.Value {
		return types.ObjectValueMust(trafficEntryType.AttrTypes, map[string]attr.Value{"version": version, "latest": latest, "percent": percent, "tag": tag})
	}
	configured := types.ListValueMust(trafficEntryType, []attr.Value{
		entry(types.Int64Value(1), types.BoolValue(false), types.Int64Value(90), types.StringNull()),
		entry(types.Int64Null(), types.BoolValue(true), types.Int64Value(10), types.StringValue("canary")),
	})
	body, err := json.Marshal(slessclientTrafficInput(trafficTargets(ctx, configured, &diags)))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"traffic":[{"percent":90,"version":1},{"latest":true,"percent":10,"tag":"canary"}]}`; string(body) != want {
		t.Errorf("body:\n got %s\nwant %s", body, want)
	}
	var api []slessclient.TrafficTarget
	if err := json.Unmarshal([]byte(`[{"version":1,"percent":90},{"latest":true,"percent":10,"tag":"canary"}]`), &api); err != nil {
		t.Fatal(err)
	}
	if got := trafficValue(ctx, configured, &api, &diags); !got.Equal(configured) {
		t.Errorf("the same split read back: got %s, want the configured %s", got, configured)
	}
	api[0].Percent, api[1].Percent = 100, 0 // `sless rollback --to 1` by hand
	drift := types.ListValueMust(trafficEntryType, []attr.Value{
		entry(types.Int64Value(1), types.BoolNull(), types.Int64Value(100), types.StringNull()),
		entry(types.Int64Null(), types.BoolValue(true), types.Int64Value(0), types.StringValue("canary")),
	})
	if got := trafficValue(ctx, configured, &api, &diags); !got.Equal(drift) {
		t.Errorf("a changed split read back: got %s, want %s", got, drift)
	}
	if got := trafficValue(ctx, configured, nil, &diags); !got.IsNull() {
		t.Errorf("no split read back: got %s, want null", got)
	}
	// What an apply does: nothing for the same split, the list for another,
	// a reset when the configuration dropped it.
	if put, reset := trafficChange(ctx, configured, drift, &diags); len(put) != 2 || reset {
		t.Errorf("changed split: put %v reset %v, want the 2 entries", put, reset)
	}
	if put, reset := trafficChange(ctx, configured, configured, &diags); put != nil || reset {
		t.Errorf("same split: put %v reset %v, want nothing", put, reset)
	}
	if put, reset := trafficChange(ctx, types.ListNull(trafficEntryType), configured, &diags); put != nil || !reset {
		t.Errorf("dropped split: put %v reset %v, want a reset", put, reset)
	}
	if put, reset := trafficChange(ctx, types.ListNull(trafficEntryType), types.ListNull(trafficEntryType), &diags); put != nil || reset {
		t.Errorf("no split: put %v reset %v, want nothing", put, reset)
	}
	if diags.HasError() {
		t.Fatal(diags)
	}
}

func slessclientTrafficInput(ts []slessclient.TrafficTarget) slessclient.TrafficInput {
	return slessclient.TrafficInput{Traffic: &ts}
}

// TestTrafficProblem: the API's 422 of a split becomes a diagnostic on the
// entry it names (as docs/versions.md shows the answers); another error
// stays one diagnostic.
func TestTrafficProblem(t *testing.T) {
	cases := []struct {
		location, message string
		want              path.Path
		detail            string
	}{
		{"body.traffic[1]", "version 9 does not exist", path.Root("traffic").AtListIndex(1), "traffic[1]: version 9 does not exist"},
		{"body.traffic", "the percents sum to 90, not 100", path.Root("traffic"), "traffic: the percents sum to 90, not 100"},
		{"body.traffic[0].tag", "expected string to match pattern", path.Root("traffic").AtListIndex(0).AtName("tag"), "traffic[0].tag: expected string to match pattern"},
	}
	for _, c := range cases {
		var diags diag.Diagnostics
		p := &slessclient.Problem{Status: 422, Title: "Unprocessable Entity", Errors: []slessclient.ProblemItem{{Location: c.location, Message: c.message}}}
		trafficProblem(fmt.Errorf("set the traffic of function demo/f: %w", p), &diags)
		if len(diags) != 1 {
			t.Fatalf("%s: %d diagnostics, want 1: %v", c.location, len(diags), diags)
		}
		d, ok := diags[0].(diag.DiagnosticWithPath)
		if !ok || !d.Path().Equal(c.want) {
			t.Errorf("%s: diagnostic %v is not on %s", c.location, diags[0], c.want)
			continue
		}
		if !strings.HasPrefix(d.Detail(), c.detail) {
			t.Errorf("%s: detail %q, want it to start with %q", c.location, d.Detail(), c.detail)
		}
	}
	var diags diag.Diagnostics
	trafficProblem(errors.New("connection refused"), &diags)
	if len(diags) != 1 || !strings.Contains(diags[0].Detail(), "connection refused") {
		t.Errorf("a transport error: %v", diags)
	}
}

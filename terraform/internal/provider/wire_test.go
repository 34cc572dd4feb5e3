package provider

import (
	"encoding/json"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"
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

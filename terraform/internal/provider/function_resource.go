package provider

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/boolplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kube5s/sless/pkg/archive"
	slessclient "github.com/kube5s/sless/pkg/client"
)

// Default waits; the timeouts block changes them.
const (
	defaultCreateTimeout = 15 * time.Minute
	defaultDeleteTimeout = 5 * time.Minute
)

type functionResource struct{ base }

func newFunctionResource() resource.Resource { return &functionResource{} }

var (
	_ resource.ResourceWithImportState    = (*functionResource)(nil)
	_ resource.ResourceWithModifyPlan     = (*functionResource)(nil)
	_ resource.ResourceWithValidateConfig = (*functionResource)(nil)
)

type functionModel struct {
	ID                types.String   `tfsdk:"id"`
	Tenant            types.String   `tfsdk:"tenant"`
	Name              types.String   `tfsdk:"name"`
	Runtime           types.String   `tfsdk:"runtime"`
	Entrypoint        types.String   `tfsdk:"entrypoint"`
	MemoryMB          types.Int64    `tfsdk:"memory_mb"`
	CPUMillis         types.Int64    `tfsdk:"cpu_millis"`
	TimeoutSec        types.Int64    `tfsdk:"timeout_sec"`
	Concurrency       types.Int64    `tfsdk:"concurrency"`
	MinReplicas       types.Int64    `tfsdk:"min_replicas"`
	MaxReplicas       types.Int64    `tfsdk:"max_replicas"`
	TargetConcurrency types.Int64    `tfsdk:"target_concurrency"`
	ScaleDownDelay    types.Int64    `tfsdk:"scale_down_delay_seconds"`
	MaxBuffered       types.Int64    `tfsdk:"max_buffered_requests"`
	ScalingSchedules  types.List     `tfsdk:"scaling_schedules"`
	EnvVars           types.Map      `tfsdk:"env_vars"`
	SecretEnvVars     types.Map      `tfsdk:"secret_env_vars"`
	AllowSourceBuilds types.Bool     `tfsdk:"allow_source_builds"`
	SourceDir         types.String   `tfsdk:"source_dir"`
	SourceExcludes    types.List     `tfsdk:"source_excludes"`
	SourceZip         types.String   `tfsdk:"source_zip"`
	SourceSHA256      types.String   `tfsdk:"source_sha256"`
	URL               types.String   `tfsdk:"url"`
	Phase             types.String   `tfsdk:"phase"`
	LastBuildID       types.String   `tfsdk:"last_build_id"`
	LatestVersion     types.Int64    `tfsdk:"latest_version"`
	Traffic           types.List     `tfsdk:"traffic"`
	Timeouts          timeouts.Value `tfsdk:"timeouts"`
}

var secretRefType = types.ObjectType{AttrTypes: map[string]attr.Type{"secret": types.StringType, "key": types.StringType}}

func (r *functionResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_function"
}

func optionalInt(desc string) schema.Int64Attribute {
	return schema.Int64Attribute{
		Optional: true, Computed: true, Description: desc,
		PlanModifiers: []planmodifier.Int64{int64planmodifier.UseStateForUnknown()},
	}
}

func (r *functionResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A function: its code (from `source_dir` or `source_zip`), runtime and limits. " +
			"Create and update wait until the function is Ready with the planned code, and fail with the build's reason and the end of its log; " +
			"delete waits until the function is gone.",
		Attributes: map[string]schema.Attribute{
			"id":     idAttribute(),
			"tenant": tenantAttribute(),
			"name":   nameAttribute("function", 53),
			"runtime": schema.StringAttribute{
				Required: true, Description: "`" + strings.Join(runtimeNames(), "` or `") + "`.",
				Validators: []validator.String{stringvalidator.OneOf(runtimeNames()...)},
			},
			"entrypoint": schema.StringAttribute{
				Required: true, Description: "`module.function` (Python) or `file.export` (Node), for example `main.handler`.",
			},
			"memory_mb":                optionalInt("Memory limit in MiB (32-8192; the platform's default is 128)."),
			"cpu_millis":               optionalInt("CPU limit in millicores (10-8000; default 100)."),
			"timeout_sec":              optionalInt("Longest an invocation may run, in seconds (1-900; default 30)."),
			"concurrency":              optionalInt("Invocations in flight per replica (1-1000; default 10)."),
			"min_replicas":             optionalInt("Scaling: replicas kept running (0-100; unset: the platform's default, 1 unless its operator is configured otherwise)."),
			"max_replicas":             optionalInt("Scaling: most replicas (1-100; unset: the platform's default, 1 unless configured otherwise; never above the tenant's pods quota)."),
			"target_concurrency":       optionalInt("Scaling: calls in flight per replica the scaler plans for (0-1000; 0: the platform's share of concurrency, 70 % unless configured otherwise)."),
			"scale_down_delay_seconds": optionalInt("Scaling: how long lower demand lasts before replicas go down (0-3600; 0: the platform's default, 120 unless configured otherwise)."),
			"max_buffered_requests":    optionalInt("Scaling: calls a gateway holds for a version that wakes or is full (0-100000; 0: the platform's default, 1000 unless configured otherwise)."),
			"scaling_schedules":        schedulesAttribute(),
			"env_vars": schema.MapAttribute{
				Optional: true, ElementType: types.StringType,
				Description: "Environment variables for the function.",
			},
			"secret_env_vars": schema.MapNestedAttribute{
				Optional:    true,
				Description: "Environment variables taken from a key of a Secret in the tenant's namespace.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"secret": schema.StringAttribute{Required: true, Description: "The Secret's name."},
					"key":    schema.StringAttribute{Required: true, Description: "The key in the Secret."},
				}},
			},
			"allow_source_builds": schema.BoolAttribute{
				Optional: true, Computed: true,
				Description:   "Let pip build source distributions; by default only wheels are installed.",
				PlanModifiers: []planmodifier.Bool{boolplanmodifier.UseStateForUnknown()},
			},
			"source_dir": schema.StringAttribute{
				Optional: true,
				Description: "A directory whose files are the function's code. It is zipped deterministically (entries sorted, fixed times; the same archive as `sless deploy` makes), " +
					"so the same tree always has the same `source_sha256`, and a changed file plans an update and a new build.",
				Validators: []validator.String{stringvalidator.ExactlyOneOf(path.MatchRoot("source_dir"), path.MatchRoot("source_zip"))},
			},
			"source_excludes": schema.ListAttribute{
				Optional: true, ElementType: types.StringType,
				Description: "Paths of source_dir left out of the archive (path.Match patterns, matched against the slash path from source_dir or the base name). " +
					"Version control, caches and `sless.yaml` are always left out, as `sless deploy` leaves them out.",
			},
			"source_zip": schema.StringAttribute{
				Optional:    true,
				Description: "A zip archive of the function's code, uploaded as it is. Exactly one of `source_dir` and `source_zip` is set.",
			},
			"source_sha256": schema.StringAttribute{
				Computed:    true,
				Description: "The SHA-256 of the archive the function runs (planned from `source_dir` or `source_zip`). Empty while the uploaded archive does not serve (after an apply whose build failed, the previous version still serves), so that the next plan shows the update again.",
			},
			"url": schema.StringAttribute{
				Computed: true, Description: "The function's invoke URL.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"phase": schema.StringAttribute{
				Computed: true, Description: "The function's phase (Ready after every successful apply).",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"last_build_id": schema.StringAttribute{
				Computed: true, Description: "The build that made the running code.",
			},
			"latest_version": schema.Int64Attribute{
				Computed: true, Description: "The newest published version (null before the first build): each successful build of changed code or settings publishes the next; traffic defaults to it.",
			},
			"traffic":  trafficAttribute(),
			"timeouts": timeouts.Attributes(ctx, timeouts.Opts{Create: true, Update: true, Delete: true}),
		},
	}
}

func (r *functionResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var dir, zip types.String
	var traffic types.List
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("traffic"), &traffic)...)
	validateTraffic(ctx, traffic, &resp.Diagnostics)
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("source_dir"), &dir)...)
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("source_zip"), &zip)...)
	if !dir.IsNull() && !dir.IsUnknown() {
		if st, err := os.Stat(dir.ValueString()); err != nil || !st.IsDir() {
			resp.Diagnostics.AddAttributeError(path.Root("source_dir"), "Invalid source_dir", fmt.Sprintf("%q is not a readable directory.", dir.ValueString()))
		}
	}
	if !zip.IsNull() && !zip.IsUnknown() {
		if st, err := os.Stat(zip.ValueString()); err != nil || !st.Mode().IsRegular() {
			resp.Diagnostics.AddAttributeError(path.Root("source_zip"), "Invalid source_zip", fmt.Sprintf("%q is not a readable file.", zip.ValueString()))
		}
	}
}

// packSource is the archive the configuration names and its SHA-256.
func packSource(m *functionModel) ([]byte, string, error) {
	if !m.SourceDir.IsNull() {
		var exclude []string
		for _, e := range m.SourceExcludes.Elements() {
			if s, ok := e.(types.String); ok {
				exclude = append(exclude, s.ValueString())
			}
		}
		p, err := archive.Pack(m.SourceDir.ValueString(), exclude)
		if err != nil {
			return nil, "", err
		}
		return p.Bytes, p.SHA256, nil
	}
	b, err := os.ReadFile(m.SourceZip.ValueString())
	if err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(b)
	return b, hex.EncodeToString(sum[:]), nil
}

// ModifyPlan puts the source's digest into the plan, so that a changed
// tree (or zip) shows as an update with a new build.
func (r *functionResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() {
		return // destroy
	}
	var plan functionModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if plan.Tenant.IsUnknown() && r.data != nil && r.data.tenant != "" {
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("tenant"), r.data.tenant)...)
		if !plan.Name.IsUnknown() {
			resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("id"), r.data.tenant+"/"+plan.Name.ValueString())...)
		}
	}
	if plan.SourceDir.IsUnknown() || plan.SourceZip.IsUnknown() || (plan.SourceDir.IsNull() && plan.SourceZip.IsNull()) {
		return // known at apply
	}
	_, sum, err := packSource(&plan)
	if err != nil {
		resp.Diagnostics.AddError("Cannot read the function's source", err.Error())
		return
	}
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("source_sha256"), sum)...)
	var prior types.String
	if !req.State.Raw.IsNull() {
		resp.Diagnostics.Append(req.State.GetAttribute(ctx, path.Root("source_sha256"), &prior)...)
		if prior.ValueString() == sum {
			var last types.String
			resp.Diagnostics.Append(req.State.GetAttribute(ctx, path.Root("last_build_id"), &last)...)
			resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("last_build_id"), last)...)
		} else {
			// New code: a new build, the phase it ends in,
			resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("last_build_id"), types.StringUnknown())...)
			resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("phase"), types.StringUnknown())...)
			// and the version it publishes (or the older one it makes
			// latest again).
			resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("latest_version"), types.Int64Unknown())...)
		}
	}
}

// input is the function the plan asks for, as the API creates it.
func (m *functionModel) input(ctx context.Context, diags *diag.Diagnostics) slessclient.FunctionInput {
	in := slessclient.FunctionInput{
		Name: m.Name.ValueString(), Runtime: slessclient.FunctionInputRuntime(m.Runtime.ValueString()), Entrypoint: m.Entrypoint.ValueString(),
		MemoryMb: i32(m.MemoryMB), CpuMillis: i32(m.CPUMillis), TimeoutSec: i32(m.TimeoutSec), Concurrency: i32(m.Concurrency),
		MinReplicas: i32(m.MinReplicas), MaxReplicas: i32(m.MaxReplicas), TargetConcurrency: i32(m.TargetConcurrency),
		ScaleDownDelaySeconds: i32(m.ScaleDownDelay), MaxBufferedRequests: i32(m.MaxBuffered),
	}
	in.ScalingSchedules = schedulesInput(ctx, m.ScalingSchedules, diags)
	if m.AllowSourceBuilds.ValueBool() {
		in.AllowSourceBuilds = new(true)
	}
	if !m.EnvVars.IsNull() && !m.EnvVars.IsUnknown() {
		var env map[string]string
		diags.Append(m.EnvVars.ElementsAs(ctx, &env, false)...)
		if len(env) > 0 {
			in.EnvVars = &env
		}
	}
	if !m.SecretEnvVars.IsNull() && !m.SecretEnvVars.IsUnknown() {
		var refs map[string]secretRefModel
		diags.Append(m.SecretEnvVars.ElementsAs(ctx, &refs, false)...)
		if len(refs) > 0 {
			secrets := map[string]slessclient.SecretRef{}
			for k, v := range refs {
				secrets[k] = slessclient.SecretRef{Secret: v.Secret.ValueString(), Key: v.Key.ValueString()}
			}
			in.SecretEnvVars = &secrets
		}
	}
	return in
}

// replacement is the spec of in as PUT replaces it. PUT needs env_vars
// even when there are none: its absence would keep the old ones.
func replacement(in slessclient.FunctionInput) slessclient.FunctionReplacement {
	env := deref(in.EnvVars)
	if env == nil {
		env = map[string]string{}
	}
	return slessclient.FunctionReplacement{
		Runtime: slessclient.FunctionReplacementRuntime(in.Runtime), Entrypoint: in.Entrypoint,
		MemoryMb: in.MemoryMb, CpuMillis: in.CpuMillis, TimeoutSec: in.TimeoutSec, Concurrency: in.Concurrency,
		MinReplicas: in.MinReplicas, MaxReplicas: in.MaxReplicas, TargetConcurrency: in.TargetConcurrency,
		ScaleDownDelaySeconds: in.ScaleDownDelaySeconds, MaxBufferedRequests: in.MaxBufferedRequests, AllowSourceBuilds: in.AllowSourceBuilds,
		ScalingSchedules: in.ScalingSchedules, EnvVars: &env, SecretEnvVars: in.SecretEnvVars,
	}
}

// fill writes what the server holds into the model. Maps the
// configuration leaves out stay null when the server's are empty.
func (m *functionModel) fill(f *slessclient.Function, diags *diag.Diagnostics) {
	m.Name = types.StringValue(f.Name)
	m.ID = types.StringValue(m.Tenant.ValueString() + "/" + f.Name)
	m.Runtime, m.Entrypoint = types.StringValue(string(f.Runtime)), types.StringValue(f.Entrypoint)
	m.MemoryMB, m.CPUMillis, m.TimeoutSec, m.Concurrency = i64(f.MemoryMb), i64(f.CpuMillis), i64(f.TimeoutSec), i64(f.Concurrency)
	m.MinReplicas, m.MaxReplicas = i64(f.MinReplicas), i64(f.MaxReplicas)
	m.TargetConcurrency, m.ScaleDownDelay, m.MaxBuffered = i64(f.TargetConcurrency), i64(f.ScaleDownDelaySeconds), i64(f.MaxBufferedRequests)
	m.ScalingSchedules = schedulesState(f.ScalingSchedules, diags)
	m.AllowSourceBuilds = types.BoolValue(deref(f.AllowSourceBuilds))
	env, secrets := deref(f.EnvVars), deref(f.SecretEnvVars)
	if len(env) == 0 && (m.EnvVars.IsNull() || len(m.EnvVars.Elements()) == 0) {
		// keep null or {} as configured
		if m.EnvVars.IsUnknown() {
			m.EnvVars = types.MapNull(types.StringType)
		}
	} else {
		v, d := types.MapValueFrom(context.Background(), types.StringType, env)
		diags.Append(d...)
		m.EnvVars = v
	}
	if len(secrets) == 0 && (m.SecretEnvVars.IsNull() || len(m.SecretEnvVars.Elements()) == 0) {
		if m.SecretEnvVars.IsUnknown() {
			m.SecretEnvVars = types.MapNull(secretRefType)
		}
	} else {
		refs := map[string]attr.Value{}
		for k, ref := range secrets {
			o, d := types.ObjectValue(secretRefType.AttrTypes, map[string]attr.Value{"secret": types.StringValue(ref.Secret), "key": types.StringValue(ref.Key)})
			diags.Append(d...)
			refs[k] = o
		}
		v, d := types.MapValue(secretRefType, refs)
		diags.Append(d...)
		m.SecretEnvVars = v
	}
	st := f.Status
	if f.Source != nil {
		// The uploaded digest only once it is what serves: after an update
		// whose build failed, the function runs the previous digest with
		// the failed one in its spec, and the state says neither, so that
		// the next plan shows the update again (to a fixed source, or back
		// to the previous one).
		served := ""
		if deref(st.BuiltSourceSha256) == f.Source.Sha256 {
			served = f.Source.Sha256
		}
		m.SourceSHA256 = types.StringValue(served)
	} else {
		m.SourceSHA256 = types.StringNull()
	}
	m.URL, m.Phase, m.LastBuildID = str(deref(st.Url)), str(deref(st.Phase)), str(deref(st.LastBuildId))
	m.LatestVersion = versionNumber(st.LatestVersion)
}

func (r *functionResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan functionModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	timeout, d := plan.Timeouts.Create(ctx, defaultCreateTimeout)
	resp.Diagnostics.Append(d...)
	tenant := r.tenantOf(plan.Tenant, &resp.Diagnostics)
	in := plan.input(ctx, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	plan.Tenant = types.StringValue(tenant)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	zip, sum, err := packSource(&plan)
	if err != nil {
		resp.Diagnostics.AddError("Cannot read the function's source", err.Error())
		return
	}
	c := r.data.client
	f, err := c.createFunction(ctx, tenant, in)
	if err != nil {
		resp.Diagnostics.AddError("Cannot create the function", err.Error())
		return
	}
	// From here on the function exists: record it, so that a failure below
	// leaves it in the state (tainted) instead of orphaned.
	planned := plan.SourceSHA256
	plan.fill(f, &resp.Diagnostics)
	r.upload(ctx, &plan, planned, zip, sum, &resp.Diagnostics)
	r.traffic(ctx, &plan, types.ListNull(trafficEntryType), &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

// traffic applies the planned split once the code serves; had is the
// split the state holds. After a failed upload nothing changed it.
func (r *functionResource) traffic(ctx context.Context, m *functionModel, had types.List, diags *diag.Diagnostics) {
	if diags.HasError() {
		m.Traffic = had
		return
	}
	r.applyTraffic(ctx, m, had, diags)
}

func (r *functionResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state functionModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	timeout, d := plan.Timeouts.Update(ctx, defaultCreateTimeout)
	resp.Diagnostics.Append(d...)
	spec := replacement(plan.input(ctx, &resp.Diagnostics))
	if resp.Diagnostics.HasError() {
		return
	}
	plan.Tenant = state.Tenant
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	zip, sum, err := packSource(&plan)
	if err != nil {
		resp.Diagnostics.AddError("Cannot read the function's source", err.Error())
		return
	}
	c := r.data.client
	tenant, name := state.Tenant.ValueString(), state.Name.ValueString()
	// PUT replaces the whole spec: fields left to the platform's defaults
	// keep what the function has now.
	cur, err := c.getFunction(ctx, tenant, name)
	if err != nil {
		resp.Diagnostics.AddError("Cannot read the function", err.Error())
		return
	}
	keep := func(p **int32, now *int32) {
		if *p == nil {
			*p = now
		}
	}
	keep(&spec.MemoryMb, cur.MemoryMb)
	keep(&spec.CpuMillis, cur.CpuMillis)
	keep(&spec.TimeoutSec, cur.TimeoutSec)
	keep(&spec.Concurrency, cur.Concurrency)
	keep(&spec.MinReplicas, cur.MinReplicas)
	keep(&spec.MaxReplicas, cur.MaxReplicas)
	keep(&spec.TargetConcurrency, cur.TargetConcurrency)
	keep(&spec.ScaleDownDelaySeconds, cur.ScaleDownDelaySeconds)
	keep(&spec.MaxBufferedRequests, cur.MaxBufferedRequests)
	f, err := c.replaceFunction(ctx, tenant, name, spec)
	if err != nil {
		resp.Diagnostics.AddError("Cannot update the function", err.Error())
		return
	}
	planned := plan.SourceSHA256
	plan.fill(f, &resp.Diagnostics)
	r.upload(ctx, &plan, planned, zip, sum, &resp.Diagnostics)
	r.traffic(ctx, &plan, state.Traffic, &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

// upload sends the archive (the platform ignores bytes it already has) and
// waits until the function runs it, writing the outcome into m. planned is
// the digest the plan showed.
func (r *functionResource) upload(ctx context.Context, m *functionModel, planned types.String, zip []byte, sum string, diags *diag.Diagnostics) {
	c := r.data.client
	tenant, name := m.Tenant.ValueString(), m.Name.ValueString()
	if !planned.IsUnknown() && !planned.IsNull() && planned.ValueString() != sum {
		diags.AddError("The source changed after the plan",
			fmt.Sprintf("The plan uploads %s but %s is now %s; plan again.", planned.ValueString(), sourceName(m), sum))
		return
	}
	if err := c.uploadSource(ctx, tenant, name, zip); err != nil {
		diags.AddError("Cannot upload the function's source", err.Error())
		return
	}
	m.SourceSHA256 = types.StringValue(sum)
	f, err := waitFunctionReady(ctx, c, tenant, name, sum)
	if f != nil {
		m.fill(f, diags) // source_sha256: sum once it serves
	} else if err != nil {
		m.SourceSHA256 = types.StringValue("") // nothing known to serve: the next plan updates again
	}
	if err != nil {
		diags.AddError("The function did not become ready", err.Error())
	}
}

func sourceName(m *functionModel) string {
	if !m.SourceDir.IsNull() {
		return "source_dir " + m.SourceDir.ValueString()
	}
	return "source_zip " + m.SourceZip.ValueString()
}

// errBuildFailed is a build that ended in failure, with its reason.
var errBuildFailed = errors.New("the build failed")

// waitFunctionReady waits (the gateway's wait=ready watch for the digest
// sum, a minute at a time) until sum serves, or its build failed (the error
// then carries the build's reason, message and the end of its log), or it
// cannot serve for another reason. The gateway judges (api/wait.go); an
// update whose build fails ends as soon as the failure is recorded, while
// the previous version still serves.
func waitFunctionReady(ctx context.Context, c *client, tenant, name, sum string) (*slessclient.Function, error) {
	var f *slessclient.Function // the last answer read
	var err error
	for {
		var got *slessclient.Function
		var outcome string
		if got, outcome, err = c.waitFunction(ctx, tenant, name, sum, time.Minute); err == nil {
			f = got
			switch outcome {
			case "ready":
				return f, nil
			case "failed":
				return f, failure(ctx, c, tenant, name, sum, f)
			}
			continue // the wait's timeout: wait again
		}
		// A transport error or a problem: try again a moment later.
		select {
		case <-ctx.Done():
			if f == nil {
				return f, fmt.Errorf("function %s/%s: %w (last error: %v)", tenant, name, ctx.Err(), err)
			}
			return f, fmt.Errorf("function %s/%s is not ready: %w; it was %s: %s (built source %q, want %q; last error: %v)",
				tenant, name, ctx.Err(), deref(f.Status.Phase), deref(f.Status.Message), deref(f.Status.BuiltSourceSha256), sum, err)
		case <-time.After(time.Second):
		}
	}
}

// failure explains a wait for sum that ended failed: its build failed (the
// build's reason, message and the end of its log), another source replaced
// it, or it was built and does not run.
func failure(ctx context.Context, c *client, tenant, name, sum string, f *slessclient.Function) error {
	st := f.Status
	if f.Source == nil || f.Source.Sha256 != sum {
		now := "no source"
		if f.Source != nil {
			now = "source " + f.Source.Sha256
		}
		return fmt.Errorf("function %s/%s now has %s, not %s: another apply or deploy replaced it; plan again", tenant, name, now, sum)
	}
	if id := deref(st.LastBuildId); id != "" {
		b, err := c.getBuild(ctx, tenant, name, id)
		if err == nil && b.SourceSha256 == sum && b.State == slessclient.BuildStateFailed {
			msg := fmt.Sprintf("%v: %s: %s", errBuildFailed, deref(b.Reason), deref(b.Message))
			if log, err := c.buildLog(ctx, tenant, name, b.Id); err == nil && strings.TrimSpace(log) != "" {
				msg += "\n\nThe end of build " + b.Id + "'s log:\n" + tail(log, 20)
			}
			if built := deref(st.BuiltSourceSha256); built != "" && built != sum {
				msg += "\n\nThe previous version (source " + built + ") still serves."
			}
			return errors.New(msg)
		}
	}
	return fmt.Errorf("function %s/%s failed: %s", tenant, name, deref(st.Message))
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (r *functionResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state functionModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	f, err := r.data.client.getFunction(ctx, state.Tenant.ValueString(), state.Name.ValueString())
	if isNotFound(err) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		resp.Diagnostics.AddError("Cannot read the function", err.Error())
		return
	}
	state.fill(f, &resp.Diagnostics)
	// The split shows (and drifts) once the configuration manages it, or
	// when an import reads it.
	imported, d := req.Private.GetKey(ctx, importKey)
	resp.Diagnostics.Append(d...)
	if !state.Traffic.IsNull() || len(imported) > 0 {
		state.Traffic = trafficValue(ctx, state.Traffic, f.Traffic, &resp.Diagnostics)
	}
	resp.Diagnostics.Append(resp.Private.SetKey(ctx, importKey, nil)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

// importKey marks, in the private state, a function just imported: its
// first read takes the split it has.
const importKey = "imported"

func (r *functionResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state functionModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	timeout, d := state.Timeouts.Delete(ctx, defaultDeleteTimeout)
	resp.Diagnostics.Append(d...)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := r.data.client
	tenant, name := state.Tenant.ValueString(), state.Name.ValueString()
	if err := c.deleteFunction(ctx, tenant, name); err != nil && !isNotFound(err) {
		resp.Diagnostics.AddError("Cannot delete the function", err.Error())
		return
	}
	err := waitGone(ctx, "function "+tenant+"/"+name, func(ctx context.Context) error {
		_, err := c.getFunction(ctx, tenant, name)
		return err
	})
	if err != nil {
		resp.Diagnostics.AddError("The function was not deleted", err.Error())
	}
}

func (r *functionResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importTenantName(ctx, req, resp)
	resp.Diagnostics.Append(resp.Private.SetKey(ctx, importKey, []byte("true"))...)
}

// runtimeNames are the runtimes a function may name: the API's.
func runtimeNames() []string {
	var names []string
	for _, r := range slessclient.Runtimes() {
		names = append(names, string(r))
	}
	return names
}

package provider

import (
	"context"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

type dataBase struct{ base }

func (b *dataBase) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	b.configure(req.ProviderData, &resp.Diagnostics)
}

// -------------------------------------------------------------- function

type functionDataSource struct{ dataBase }

func newFunctionDataSource() datasource.DataSource { return &functionDataSource{} }

type functionDataModel struct {
	ID                types.String `tfsdk:"id"`
	Tenant            types.String `tfsdk:"tenant"`
	Name              types.String `tfsdk:"name"`
	Runtime           types.String `tfsdk:"runtime"`
	Entrypoint        types.String `tfsdk:"entrypoint"`
	MemoryMB          types.Int64  `tfsdk:"memory_mb"`
	CPUMillis         types.Int64  `tfsdk:"cpu_millis"`
	TimeoutSec        types.Int64  `tfsdk:"timeout_sec"`
	Concurrency       types.Int64  `tfsdk:"concurrency"`
	MinReplicas       types.Int64  `tfsdk:"min_replicas"`
	MaxReplicas       types.Int64  `tfsdk:"max_replicas"`
	TargetConcurrency types.Int64  `tfsdk:"target_concurrency"`
	ScaleDownDelay    types.Int64  `tfsdk:"scale_down_delay_seconds"`
	MaxBuffered       types.Int64  `tfsdk:"max_buffered_requests"`
	ScalingSchedules  types.List   `tfsdk:"scaling_schedules"`
	EnvVars           types.Map    `tfsdk:"env_vars"`
	SourceSHA256      types.String `tfsdk:"source_sha256"`
	BuiltSourceSHA256 types.String `tfsdk:"built_source_sha256"`
	URL               types.String `tfsdk:"url"`
	Phase             types.String `tfsdk:"phase"`
	Ready             types.Bool   `tfsdk:"ready"`
	Message           types.String `tfsdk:"message"`
	LastBuildID       types.String `tfsdk:"last_build_id"`
	LatestVersion     types.Int64  `tfsdk:"latest_version"`
}

func (d *functionDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_function"
}

func (d *functionDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	c := func(desc string) schema.StringAttribute {
		return schema.StringAttribute{Computed: true, Description: desc}
	}
	n := func(desc string) schema.Int64Attribute {
		return schema.Int64Attribute{Computed: true, Description: desc}
	}
	resp.Schema = schema.Schema{
		Description: "Reads a function and its status.",
		Attributes: map[string]schema.Attribute{
			"id":                       c("`<tenant>/<name>`."),
			"tenant":                   schema.StringAttribute{Optional: true, Computed: true, Description: "The function's tenant (default: the provider's)."},
			"name":                     schema.StringAttribute{Required: true, Description: "The function's name."},
			"runtime":                  c("`" + strings.Join(runtimeNames(), "` or `") + "`."),
			"entrypoint":               c("The handler."),
			"memory_mb":                n("Memory limit in MiB."),
			"cpu_millis":               n("CPU limit in millicores."),
			"timeout_sec":              n("Invocation timeout in seconds."),
			"concurrency":              n("Invocations in flight per replica."),
			"min_replicas":             n("Fewest replicas (null: the platform's default)."),
			"max_replicas":             n("Most replicas."),
			"target_concurrency":       n("Calls in flight per replica the scaler plans for (0: the platform's share of concurrency)."),
			"scale_down_delay_seconds": n("How long lower demand lasts before replicas go down (0: the platform's default)."),
			"max_buffered_requests":    n("Calls a gateway holds for a version that wakes or is full (0: the platform's default)."),
			"scaling_schedules": schema.ListAttribute{Computed: true, ElementType: scheduleType,
				Description: "Floors of replicas from each start of a cron schedule: cron, time_zone, duration_seconds, min_replicas (null: none)."},
			"env_vars":            schema.MapAttribute{Computed: true, ElementType: types.StringType, Description: "Environment variables."},
			"source_sha256":       c("The uploaded archive's SHA-256."),
			"built_source_sha256": c("The SHA-256 of the archive the running code was built from."),
			"url":                 c("The invoke URL."),
			"phase":               c("Pending, Building, Deploying, Ready or Failed."),
			"ready":               schema.BoolAttribute{Computed: true, Description: "Whether it serves."},
			"message":             c("What the platform says about its state."),
			"last_build_id":       c("The last build."),
			"latest_version":      schema.Int64Attribute{Computed: true, Description: "The newest published version (null before the first build)."},
		},
	}
}

func (d *functionDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m functionDataModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	tenant := d.tenantOf(m.Tenant, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	f, err := d.data.client.getFunction(ctx, tenant, m.Name.ValueString())
	if err != nil {
		resp.Diagnostics.AddError("Cannot read the function", err.Error())
		return
	}
	m.Tenant, m.ID = types.StringValue(tenant), types.StringValue(tenant+"/"+f.Name)
	m.Runtime, m.Entrypoint = types.StringValue(string(f.Runtime)), types.StringValue(f.Entrypoint)
	m.MemoryMB, m.CPUMillis, m.TimeoutSec, m.Concurrency = i64(f.MemoryMb), i64(f.CpuMillis), i64(f.TimeoutSec), i64(f.Concurrency)
	m.MinReplicas, m.MaxReplicas = i64(f.MinReplicas), i64(f.MaxReplicas)
	m.TargetConcurrency, m.ScaleDownDelay, m.MaxBuffered = i64(f.TargetConcurrency), i64(f.ScaleDownDelaySeconds), i64(f.MaxBufferedRequests)
	m.ScalingSchedules = schedulesState(f.ScalingSchedules, &resp.Diagnostics)
	env := deref(f.EnvVars)
	if env == nil {
		env = map[string]string{}
	}
	var diags diag.Diagnostics
	m.EnvVars, diags = types.MapValueFrom(ctx, types.StringType, env)
	resp.Diagnostics.Append(diags...)
	m.SourceSHA256 = types.StringNull()
	if f.Source != nil {
		m.SourceSHA256 = types.StringValue(f.Source.Sha256)
	}
	st := f.Status
	m.BuiltSourceSHA256, m.URL, m.Phase, m.Message, m.LastBuildID = str(deref(st.BuiltSourceSha256)), str(deref(st.Url)), str(deref(st.Phase)), str(deref(st.Message)), str(deref(st.LastBuildId))
	m.Ready = types.BoolValue(st.Ready)
	m.LatestVersion = versionNumber(st.LatestVersion)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// ---------------------------------------------------------------- tenant

type tenantDataSource struct{ dataBase }

func newTenantDataSource() datasource.DataSource { return &tenantDataSource{} }

type tenantDataModel struct {
	ID           types.String `tfsdk:"id"`
	Name         types.String `tfsdk:"name"`
	DisplayName  types.String `tfsdk:"display_name"`
	Namespace    types.String `tfsdk:"namespace"`
	Phase        types.String `tfsdk:"phase"`
	MaxFunctions types.Int64  `tfsdk:"max_functions"`
	CPUMillis    types.Int64  `tfsdk:"cpu_millis"`
	MemoryMB     types.Int64  `tfsdk:"memory_mb"`
}

func (d *tenantDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_tenant"
}

func (d *tenantDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "Reads a tenant (a tenant token reads its own tenant; the admin token any).",
		Attributes: map[string]schema.Attribute{
			"id":            schema.StringAttribute{Computed: true, Description: "The tenant's name."},
			"name":          schema.StringAttribute{Required: true, Description: "The tenant's name."},
			"display_name":  schema.StringAttribute{Computed: true, Description: "Its human name."},
			"namespace":     schema.StringAttribute{Computed: true, Description: "Its namespace."},
			"phase":         schema.StringAttribute{Computed: true, Description: "Its phase."},
			"max_functions": schema.Int64Attribute{Computed: true, Description: "Most functions."},
			"cpu_millis":    schema.Int64Attribute{Computed: true, Description: "CPU quota in millicores."},
			"memory_mb":     schema.Int64Attribute{Computed: true, Description: "Memory quota in MiB."},
		},
	}
}

func (d *tenantDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m tenantDataModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	t, err := d.data.client.getTenant(ctx, m.Name.ValueString())
	if err != nil {
		resp.Diagnostics.AddError("Cannot read the tenant", err.Error())
		return
	}
	m.ID, m.DisplayName, m.Namespace, m.Phase = types.StringValue(t.Name), str(deref(t.DisplayName)), str(deref(t.Status.Namespace)), str(deref(t.Status.Phase))
	m.MaxFunctions, m.CPUMillis, m.MemoryMB = i64(t.Quotas.MaxFunctions), i64(t.Quotas.CpuMillis), i64(t.Quotas.MemoryMb)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

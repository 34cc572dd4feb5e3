package provider

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	slessclient "github.com/kube5s/sless/pkg/client"
)

// ------------------------------------------------------ function version

type functionVersionDataSource struct{ dataBase }

func newFunctionVersionDataSource() datasource.DataSource { return &functionVersionDataSource{} }

type functionVersionModel struct {
	ID           types.String `tfsdk:"id"`
	Tenant       types.String `tfsdk:"tenant"`
	Function     types.String `tfsdk:"function"`
	Number       types.Int64  `tfsdk:"number"`
	Latest       types.Bool   `tfsdk:"latest"`
	SourceSHA256 types.String `tfsdk:"source_sha256"`
	Image        types.String `tfsdk:"image"`
	Artifact     types.String `tfsdk:"artifact"`
	BuildID      types.String `tfsdk:"build_id"`
	Runtime      types.String `tfsdk:"runtime"`
	Entrypoint   types.String `tfsdk:"entrypoint"`
	MemoryMB     types.Int64  `tfsdk:"memory_mb"`
	CPUMillis    types.Int64  `tfsdk:"cpu_millis"`
	TimeoutSec   types.Int64  `tfsdk:"timeout_sec"`
	Concurrency  types.Int64  `tfsdk:"concurrency"`
	Env          types.List   `tfsdk:"env"`
	CreatedAt    types.String `tfsdk:"created_at"`
	Serving      types.Bool   `tfsdk:"serving"`
	Percent      types.Int64  `tfsdk:"percent"`
	Tags         types.List   `tfsdk:"tags"`
	Ready        types.Bool   `tfsdk:"ready"`
	Draining     types.Bool   `tfsdk:"draining"`
}

func (d *functionVersionDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_function_version"
}

func (d *functionVersionDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	c := func(desc string) schema.StringAttribute {
		return schema.StringAttribute{Computed: true, Description: desc}
	}
	n := func(desc string) schema.Int64Attribute {
		return schema.Int64Attribute{Computed: true, Description: desc}
	}
	b := func(desc string) schema.BoolAttribute { return schema.BoolAttribute{Computed: true, Description: desc} }
	resp.Schema = schema.Schema{
		Description: "Reads one published version of a function (GET .../versions/{n}): what runs in it, and its share of the traffic while the platform sends it work.",
		Attributes: map[string]schema.Attribute{
			"id":       c("`<tenant>/<function>/<number>`."),
			"tenant":   schema.StringAttribute{Optional: true, Computed: true, Description: "The function's tenant (default: the provider's)."},
			"function": schema.StringAttribute{Required: true, Description: "The function's name."},
			"number": schema.Int64Attribute{
				Optional: true, Computed: true, Description: "The version number; default: the function's latest version.",
				Validators: []validator.Int64{int64validator.AtLeast(1)},
			},
			"latest":        b("Whether it is the function's latest version."),
			"source_sha256": c("The SHA-256 of the source archive it was built from."),
			"image":         c("The image it runs, pinned by digest (image builds)."),
			"artifact":      c("The artifact it runs (local builds)."),
			"build_id":      c("The build that made it."),
			"runtime":       c("Its runtime."),
			"entrypoint":    c("Its handler."),
			"memory_mb":     n("Its memory limit in MiB."),
			"cpu_millis":    n("Its CPU limit in millicores."),
			"timeout_sec":   n("Its invocation timeout in seconds."),
			"concurrency":   n("Invocations in flight per replica."),
			"env":           schema.ListAttribute{Computed: true, ElementType: types.StringType, Description: "The names of its environment variables (values stay in the function's spec, secrets in their Secrets)."},
			"created_at":    c("When it was published (RFC 3339)."),
			"serving":       b("Whether the platform sends it work (it has a share, a tag, or drains)."),
			"percent":       n("Its share of untagged calls in the effective split (`status.serving`; 0 when it does not serve)."),
			"tags":          schema.ListAttribute{Computed: true, ElementType: types.StringType, Description: "The tags that route to it."},
			"ready":         b("Whether it has a ready replica to take calls (false when it does not serve)."),
			"draining":      b("Whether it finishes work it had after leaving the split."),
		},
	}
}

func (d *functionVersionDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m functionVersionModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	tenant := d.tenantOf(m.Tenant, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	c, name := d.data.client, m.Function.ValueString()
	number := m.Number.ValueInt64()
	if m.Number.IsNull() {
		f, err := c.getFunction(ctx, tenant, name)
		if err != nil {
			resp.Diagnostics.AddError("Cannot read the function", err.Error())
			return
		}
		if number = int64(deref(f.Status.LatestVersion)); number == 0 {
			resp.Diagnostics.AddAttributeError(path.Root("number"), "No version yet",
				fmt.Sprintf("Function %s/%s has published no version yet: its first build has not succeeded (phase %s).", tenant, name, deref(f.Status.Phase)))
			return
		}
	}
	v, err := c.getVersion(ctx, tenant, name, number)
	if err != nil {
		resp.Diagnostics.AddError("Cannot read the version", err.Error())
		return
	}
	m.fill(tenant, v, &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (m *functionVersionModel) fill(tenant string, v *slessclient.Version, diags *diag.Diagnostics) {
	m.Tenant, m.Function, m.Number = types.StringValue(tenant), types.StringValue(v.Function), types.Int64Value(int64(v.Version))
	m.ID = types.StringValue(fmt.Sprintf("%s/%s/%d", tenant, v.Function, v.Version))
	m.Latest = types.BoolValue(v.Latest)
	m.SourceSHA256, m.Image, m.Artifact, m.BuildID = str(deref(v.SourceSha256)), str(deref(v.Image)), str(deref(v.Artifact)), str(deref(v.BuildId))
	m.Runtime, m.Entrypoint = types.StringValue(v.Runtime), types.StringValue(v.Entrypoint)
	m.MemoryMB, m.CPUMillis = types.Int64Value(int64(v.MemoryMb)), types.Int64Value(int64(v.CpuMillis))
	m.TimeoutSec, m.Concurrency = types.Int64Value(int64(v.TimeoutSec)), types.Int64Value(int64(v.Concurrency))
	m.CreatedAt = types.StringValue(v.CreatedAt.UTC().Format(time.RFC3339))
	list := func(s []string) types.List {
		if s == nil {
			s = []string{}
		}
		l, d := types.ListValueFrom(context.Background(), types.StringType, s)
		diags.Append(d...)
		return l
	}
	m.Env = list(deref(v.Env))
	sv := deref(v.Serving)
	m.Serving = types.BoolValue(v.Serving != nil)
	m.Percent, m.Ready, m.Draining = types.Int64Value(int64(sv.Percent)), types.BoolValue(sv.Ready), types.BoolValue(deref(sv.Draining))
	m.Tags = list(deref(sv.Tags))
}

// Package provider is the sless Terraform provider (terraform-plugin-framework):
// functions, triggers, jobs, tenants and tenant tokens as resources, read
// and written through the gateway's REST API.
package provider

import (
	"context"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// New returns the provider's constructor for providerserver.
func New(version string, getenv func(string) string) func() provider.Provider {
	return func() provider.Provider { return &slessProvider{version: version, getenv: getenv} }
}

type slessProvider struct {
	version string
	getenv  func(string) string
}

type providerModel struct {
	URL    types.String `tfsdk:"url"`
	Token  types.String `tfsdk:"token"`
	Tenant types.String `tfsdk:"tenant"`
}

// providerData is what resources get from Configure.
type providerData struct {
	client *client
	tenant string // the default tenant
}

func (p *slessProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "sless"
	resp.Version = p.version
}

func (p *slessProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "Deploys functions, triggers and jobs to a sless platform through its REST API, and manages tenants and their tokens with the admin token.",
		Attributes: map[string]schema.Attribute{
			"url": schema.StringAttribute{
				Optional:    true,
				Description: "The gateway's base URL, for example `https://sless.example.com`. Defaults to the `SLESS_URL` environment variable.",
			},
			"token": schema.StringAttribute{
				Optional:    true,
				Sensitive:   true,
				Description: "A tenant token, or the admin token for `sless_tenant` and `sless_tenant_token`. Defaults to the `SLESS_TOKEN` environment variable.",
			},
			"tenant": schema.StringAttribute{
				Optional:    true,
				Description: "The tenant that resources without a `tenant` of their own belong to. Defaults to the `SLESS_TENANT` environment variable.",
			},
		},
	}
}

func (p *slessProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	var cfg providerModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}
	pick := func(v types.String, env, attr string) string {
		if v.IsUnknown() {
			resp.Diagnostics.AddAttributeError(path.Root(attr), "Unknown "+attr,
				"The provider's "+attr+" is not known until apply; set it to a value known at plan time or use "+env+".")
			return ""
		}
		if !v.IsNull() {
			return v.ValueString()
		}
		return p.getenv(env)
	}
	url := strings.TrimRight(pick(cfg.URL, "SLESS_URL", "url"), "/")
	token := pick(cfg.Token, "SLESS_TOKEN", "token")
	tenant := pick(cfg.Tenant, "SLESS_TENANT", "tenant")
	if resp.Diagnostics.HasError() {
		return
	}
	if url == "" {
		resp.Diagnostics.AddAttributeError(path.Root("url"), "Missing sless URL",
			"Set the provider's url attribute or the SLESS_URL environment variable to the gateway's base URL.")
		return
	}
	if !strings.HasPrefix(url, "http://") && !strings.HasPrefix(url, "https://") {
		resp.Diagnostics.AddAttributeError(path.Root("url"), "Invalid sless URL", "The URL must start with http:// or https://, not "+url+".")
		return
	}
	c, err := newClient(url, token, p.version)
	if err != nil {
		resp.Diagnostics.AddError("Cannot make the sless client", err.Error())
		return
	}
	data := &providerData{client: c, tenant: tenant}
	resp.ResourceData = data
	resp.DataSourceData = data
}

func (p *slessProvider) Resources(context.Context) []func() resource.Resource {
	return []func() resource.Resource{
		newFunctionResource, newTriggerResource, newJobResource, newTenantResource, newTenantTokenResource,
	}
}

func (p *slessProvider) DataSources(context.Context) []func() datasource.DataSource {
	return []func() datasource.DataSource{newFunctionDataSource, newFunctionVersionDataSource, newTenantDataSource}
}

// Address is the provider's registry address: `source = "kube5s/sless"` in
// OpenTofu (whose default registry is registry.opentofu.org).
const Address = "registry.opentofu.org/kube5s/sless"

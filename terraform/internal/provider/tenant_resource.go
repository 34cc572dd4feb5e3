package provider

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/boolplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/listplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"

	slessclient "github.com/kube5s/sless/pkg/client"
)

// ---------------------------------------------------------------- tenant

type tenantResource struct{ base }

func newTenantResource() resource.Resource { return &tenantResource{} }

var _ resource.ResourceWithImportState = (*tenantResource)(nil)

type tenantModel struct {
	ID                       types.String `tfsdk:"id"`
	Name                     types.String `tfsdk:"name"`
	DisplayName              types.String `tfsdk:"display_name"`
	MaxFunctions             types.Int64  `tfsdk:"max_functions"`
	MaxPods                  types.Int64  `tfsdk:"max_pods"`
	CPUMillis                types.Int64  `tfsdk:"cpu_millis"`
	MemoryMB                 types.Int64  `tfsdk:"memory_mb"`
	InvocationsPerSecond     types.Int64  `tfsdk:"invocations_per_second"`
	ConcurrentBuilds         types.Int64  `tfsdk:"concurrent_builds"`
	MaxConcurrentInvocations types.Int64  `tfsdk:"max_concurrent_invocations"`
	InternetEgress           types.Bool   `tfsdk:"internet_egress"`
	DeniedEgressCIDRs        types.List   `tfsdk:"denied_egress_cidrs"`
	Namespace                types.String `tfsdk:"namespace"`
	Phase                    types.String `tfsdk:"phase"`
}

func (r *tenantResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_tenant"
}

// replacingInt is a quota: the API has no update of a tenant, so a change
// replaces it.
func replacingInt(desc string) schema.Int64Attribute {
	return schema.Int64Attribute{Optional: true, Computed: true, Description: desc + " Changing it replaces the tenant.",
		PlanModifiers: []planmodifier.Int64{int64planmodifier.RequiresReplaceIfConfigured(), int64planmodifier.UseStateForUnknown()}}
}

func (r *tenantResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A tenant (admin token): its namespace `sless-fn-<name>`, quotas and egress policy. " +
			"The API cannot change a tenant, so every change replaces it, deleting everything it owns.",
		Attributes: map[string]schema.Attribute{
			"id":   schema.StringAttribute{Computed: true, Description: "The tenant's name.", PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()}},
			"name": schema.StringAttribute{Required: true, Description: "A DNS-1123 label of at most 54 characters.", Validators: nameValidators(54), PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()}},
			"display_name": schema.StringAttribute{Optional: true, Description: "A human name. Changing it replaces the tenant.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()}},
			"max_functions":              replacingInt("Most functions."),
			"max_pods":                   replacingInt("Most pods."),
			"cpu_millis":                 replacingInt("CPU quota in millicores."),
			"memory_mb":                  replacingInt("Memory quota in MiB."),
			"invocations_per_second":     replacingInt("Rate limit of invocations."),
			"concurrent_builds":          replacingInt("Builds at once."),
			"max_concurrent_invocations": replacingInt("Invocations in flight at once (0: the invoker's default)."),
			"internet_egress": schema.BoolAttribute{Optional: true, Computed: true, Description: "Whether functions may reach the internet. Changing it replaces the tenant.",
				PlanModifiers: []planmodifier.Bool{boolplanmodifier.RequiresReplaceIfConfigured(), boolplanmodifier.UseStateForUnknown()}},
			"denied_egress_cidrs": schema.ListAttribute{Optional: true, ElementType: types.StringType,
				Description:   "Networks functions may not reach. Changing it replaces the tenant.",
				PlanModifiers: []planmodifier.List{listplanmodifier.RequiresReplace()}},
			"namespace": schema.StringAttribute{Computed: true, Description: "The tenant's namespace.", PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()}},
			"phase":     schema.StringAttribute{Computed: true, Description: "The tenant's phase.", PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()}},
		},
	}
}

func (m *tenantModel) fill(t *slessclient.Tenant) {
	m.ID, m.Name = types.StringValue(t.Name), types.StringValue(t.Name)
	m.DisplayName = keepStr(m.DisplayName, deref(t.DisplayName))
	q := t.Quotas
	m.MaxFunctions, m.MaxPods, m.CPUMillis, m.MemoryMB = i64(q.MaxFunctions), i64(q.MaxPods), i64(q.CpuMillis), i64(q.MemoryMb)
	m.InvocationsPerSecond, m.ConcurrentBuilds, m.MaxConcurrentInvocations = i64(q.InvocationsPerSecond), i64(q.ConcurrentBuilds), i64(q.MaxConcurrentInvocations)
	m.InternetEgress = types.BoolValue(t.Network.InternetEgress == nil || *t.Network.InternetEgress)
	if denied := deref(t.Network.DeniedEgressCidrs); len(denied) > 0 {
		v, _ := types.ListValueFrom(context.Background(), types.StringType, denied)
		m.DeniedEgressCIDRs = v
	} else if m.DeniedEgressCIDRs.IsUnknown() || len(m.DeniedEgressCIDRs.Elements()) > 0 {
		m.DeniedEgressCIDRs = types.ListNull(types.StringType)
	}
	m.Namespace, m.Phase = str(deref(t.Status.Namespace)), str(deref(t.Status.Phase))
}

// input is the tenant the plan asks for, as the API creates it.
func (m *tenantModel) input(ctx context.Context, diags *diag.Diagnostics) slessclient.TenantInput {
	in := slessclient.TenantInput{Name: m.Name.ValueString(), DisplayName: optional[string](m.DisplayName), Quotas: &slessclient.TenantQuotas{
		MaxFunctions: i32(m.MaxFunctions), MaxPods: i32(m.MaxPods), CpuMillis: i32(m.CPUMillis), MemoryMb: i32(m.MemoryMB),
		InvocationsPerSecond: i32(m.InvocationsPerSecond), ConcurrentBuilds: i32(m.ConcurrentBuilds), MaxConcurrentInvocations: i32(m.MaxConcurrentInvocations),
	}}
	if !m.InternetEgress.IsNull() && !m.InternetEgress.IsUnknown() || !m.DeniedEgressCIDRs.IsNull() {
		in.Network = &slessclient.TenantNetwork{}
		if !m.InternetEgress.IsNull() && !m.InternetEgress.IsUnknown() {
			in.Network.InternetEgress = new(m.InternetEgress.ValueBool())
		}
		if !m.DeniedEgressCIDRs.IsNull() {
			var denied []string
			diags.Append(m.DeniedEgressCIDRs.ElementsAs(ctx, &denied, false)...)
			if len(denied) > 0 {
				in.Network.DeniedEgressCidrs = &denied
			}
		}
	}
	return in
}

func (r *tenantResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan tenantModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	in := plan.input(ctx, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	c := r.data.client
	t, err := c.createTenant(ctx, in)
	if err != nil {
		resp.Diagnostics.AddError("Cannot create the tenant", err.Error())
		return
	}
	// Wait until the operator made its namespace, quotas and broker vhost:
	// functions cannot be created in it before.
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	for deref(t.Status.Phase) != "Ready" {
		if deref(t.Status.Phase) == "Failed" {
			break
		}
		select {
		case <-wctx.Done():
			resp.Diagnostics.AddError("The tenant did not become ready",
				fmt.Sprintf("tenant %s is %q after 5m: %s", t.Name, deref(t.Status.Phase), deref(t.Status.Message)))
		case <-time.After(time.Second):
		}
		if resp.Diagnostics.HasError() {
			break
		}
		if got, err := c.getTenant(wctx, t.Name); err == nil {
			t = got
		}
	}
	plan.fill(t)
	if deref(t.Status.Phase) == "Failed" {
		resp.Diagnostics.AddError("The tenant failed", deref(t.Status.Message))
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *tenantResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state tenantModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	t, err := r.data.client.getTenant(ctx, state.Name.ValueString())
	if isNotFound(err) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		resp.Diagnostics.AddError("Cannot read the tenant", err.Error())
		return
	}
	state.fill(t)
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

func (r *tenantResource) Update(_ context.Context, _ resource.UpdateRequest, resp *resource.UpdateResponse) {
	resp.Diagnostics.AddError("A tenant cannot be changed", "Every attribute of sless_tenant replaces it; this is a provider bug.")
}

func (r *tenantResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state tenantModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	c := r.data.client
	name := state.Name.ValueString()
	if err := c.deleteTenant(ctx, name); err != nil && !isNotFound(err) {
		resp.Diagnostics.AddError("Cannot delete the tenant", err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	if err := waitGone(ctx, "tenant "+name, func(ctx context.Context) error {
		_, err := c.getTenant(ctx, name)
		return err
	}); err != nil {
		resp.Diagnostics.AddError("The tenant was not deleted", err.Error())
	}
}

func (r *tenantResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	if !dnsLabel.MatchString(req.ID) {
		resp.Diagnostics.AddError("Invalid import ID", fmt.Sprintf("Import takes the tenant's name, got %q.", req.ID))
		return
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("name"), req.ID)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), req.ID)...)
}

// ----------------------------------------------------------- tenant token

type tokenResource struct{ base }

func newTenantTokenResource() resource.Resource { return &tokenResource{} }

type tokenModel struct {
	ID      types.String `tfsdk:"id"`
	Tenant  types.String `tfsdk:"tenant"`
	Name    types.String `tfsdk:"name"`
	TokenID types.String `tfsdk:"token_id"`
	Token   types.String `tfsdk:"token"`
}

func (r *tokenResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_tenant_token"
}

func (r *tokenResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	replace := []planmodifier.String{stringplanmodifier.RequiresReplace()}
	keep := []planmodifier.String{stringplanmodifier.UseStateForUnknown()}
	resp.Schema = schema.Schema{
		Description: "A tenant token (admin token). The platform shows a token only when it issues it, so the token lives in the state " +
			"(sensitive) and cannot be imported; destroying the resource revokes it.",
		Attributes: map[string]schema.Attribute{
			"id":       schema.StringAttribute{Computed: true, Description: "`<tenant>/<token_id>`.", PlanModifiers: keep},
			"tenant":   schema.StringAttribute{Required: true, Description: "The tenant the token acts for.", Validators: nameValidators(54), PlanModifiers: replace},
			"name":     schema.StringAttribute{Optional: true, Description: "A label for the token.", PlanModifiers: replace},
			"token_id": schema.StringAttribute{Computed: true, Description: "The token's id (revoke it with the API).", PlanModifiers: keep},
			"token":    schema.StringAttribute{Computed: true, Sensitive: true, Description: "The bearer token.", PlanModifiers: keep},
		},
	}
}

func (r *tokenResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan tokenModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	t, err := r.data.client.createToken(ctx, plan.Tenant.ValueString(), optStr(plan.Name))
	if err != nil {
		resp.Diagnostics.AddError("Cannot issue the token", err.Error())
		return
	}
	plan.ID = types.StringValue(t.Tenant + "/" + t.Id)
	plan.TokenID, plan.Token = types.StringValue(t.Id), types.StringValue(t.Token)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

// Read keeps the state: the API has no way to read a token back. A revoked
// token is found out when it is used.
func (r *tokenResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state tokenModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if _, err := r.data.client.getTenant(ctx, state.Tenant.ValueString()); isNotFound(err) {
		resp.State.RemoveResource(ctx) // its tenant is gone, and the token with it
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

func (r *tokenResource) Update(_ context.Context, _ resource.UpdateRequest, resp *resource.UpdateResponse) {
	resp.Diagnostics.AddError("A token cannot be changed", "Every attribute of sless_tenant_token replaces it; this is a provider bug.")
}

func (r *tokenResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state tokenModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if err := r.data.client.revokeToken(ctx, state.Tenant.ValueString(), state.TokenID.ValueString()); err != nil && !isNotFound(err) {
		resp.Diagnostics.AddError("Cannot revoke the token", err.Error())
	}
}

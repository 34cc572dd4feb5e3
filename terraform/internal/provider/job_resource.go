package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"

	slessclient "github.com/kube5s/sless/pkg/client"
)

type jobResource struct{ base }

func newJobResource() resource.Resource { return &jobResource{} }

var _ resource.ResourceWithImportState = (*jobResource)(nil)

type jobModel struct {
	ID           types.String `tfsdk:"id"`
	Tenant       types.String `tfsdk:"tenant"`
	Name         types.String `tfsdk:"name"`
	Function     types.String `tfsdk:"function"`
	RunID        types.Int64  `tfsdk:"run_id"`
	Payload      types.String `tfsdk:"payload"`
	TimeoutSec   types.Int64  `tfsdk:"timeout_sec"`
	MaxRetries   types.Int64  `tfsdk:"max_retries"`
	Phase        types.String `tfsdk:"phase"`
	LastRunID    types.Int64  `tfsdk:"last_run_id"`
	InvocationID types.String `tfsdk:"invocation_id"`
}

func (r *jobResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_job"
}

func (r *jobResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A one-off run of a function (a FunctionJob). It runs once for each new `run_id` once the function is Ready; `run_id = 0` never runs.",
		Attributes: map[string]schema.Attribute{
			"id":       idAttribute(),
			"tenant":   tenantAttribute(),
			"name":     nameAttribute("job", 63),
			"function": schema.StringAttribute{Required: true, Description: "The function it runs.", Validators: nameValidators(63)},
			"run_id": schema.Int64Attribute{Optional: true, Computed: true,
				Description:   "Each new value runs the job once; 0 (the default) does not run it.",
				PlanModifiers: []planmodifier.Int64{int64planmodifier.UseStateForUnknown()}},
			"payload":     schema.StringAttribute{Optional: true, Description: "The JSON body of the run (use jsonencode)."},
			"timeout_sec": optionalInt("Longest a run may take, in seconds (0-3600)."),
			"max_retries": optionalInt("Retries of a failed run (0-10)."),
			"phase":       schema.StringAttribute{Computed: true, Description: "Skipped, Waiting, Running, Succeeded or Failed."},
			"last_run_id": schema.Int64Attribute{Computed: true, Description: "The run_id of the last run."},
			"invocation_id": schema.StringAttribute{Computed: true,
				Description: "The last run's invocation (read it with the invocations API)."},
		},
	}
}

// input is the job the plan asks for, as the API creates it.
func (m *jobModel) input(diags *diag.Diagnostics) slessclient.JobInput {
	in := slessclient.JobInput{Name: m.Name.ValueString(), Function: m.Function.ValueString(), Payload: jsonAttr(m.Payload, "payload", diags),
		TimeoutSec: i32(m.TimeoutSec), MaxRetries: i32(m.MaxRetries)}
	if !m.RunID.IsNull() && !m.RunID.IsUnknown() {
		in.RunId = new(m.RunID.ValueInt64())
	}
	return in
}

// jobReplacement is the spec of in as PUT replaces it: the input without
// its name.
func jobReplacement(in slessclient.JobInput) slessclient.JobReplacement {
	return slessclient.JobReplacement{Function: in.Function, Payload: in.Payload, RunId: in.RunId, TimeoutSec: in.TimeoutSec, MaxRetries: in.MaxRetries}
}

func (m *jobModel) fill(j *slessclient.Job, diags *diag.Diagnostics) {
	m.ID = types.StringValue(m.Tenant.ValueString() + "/" + j.Name)
	m.Name, m.Function = types.StringValue(j.Name), types.StringValue(j.Function)
	m.RunID = types.Int64Value(deref(j.RunId))
	m.Payload = jsonValue(m.Payload, j.Payload, diags)
	m.TimeoutSec, m.MaxRetries = i64(j.TimeoutSec), i64(j.MaxRetries)
	m.Phase, m.LastRunID, m.InvocationID = str(deref(j.Status.Phase)), types.Int64Value(j.Status.LastRunId), str(deref(j.Status.InvocationId))
}

func (r *jobResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan jobModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	tenant := r.tenantOf(plan.Tenant, &resp.Diagnostics)
	in := plan.input(&resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	plan.Tenant = types.StringValue(tenant)
	j, err := r.data.client.createJob(ctx, tenant, in)
	if err != nil {
		resp.Diagnostics.AddError("Cannot create the job", err.Error())
		return
	}
	plan.fill(j, &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *jobResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state jobModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	j, err := r.data.client.getJob(ctx, state.Tenant.ValueString(), state.Name.ValueString())
	if isNotFound(err) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		resp.Diagnostics.AddError("Cannot read the job", err.Error())
		return
	}
	state.fill(j, &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

func (r *jobResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state jobModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	spec := jobReplacement(plan.input(&resp.Diagnostics))
	if resp.Diagnostics.HasError() {
		return
	}
	plan.Tenant = state.Tenant
	j, err := r.data.client.putJob(ctx, state.Tenant.ValueString(), state.Name.ValueString(), spec)
	if err != nil {
		resp.Diagnostics.AddError("Cannot update the job", err.Error())
		return
	}
	plan.fill(j, &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *jobResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state jobModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	c := r.data.client
	tenant, name := state.Tenant.ValueString(), state.Name.ValueString()
	if err := c.deleteJob(ctx, tenant, name); err != nil && !isNotFound(err) {
		resp.Diagnostics.AddError("Cannot delete the job", err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(ctx, defaultDeleteTimeout)
	defer cancel()
	if err := waitGone(ctx, "job "+tenant+"/"+name, func(ctx context.Context) error {
		_, err := c.getJob(ctx, tenant, name)
		return err
	}); err != nil {
		resp.Diagnostics.AddError("The job was not deleted", err.Error())
	}
}

func (r *jobResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importTenantName(ctx, req, resp)
}

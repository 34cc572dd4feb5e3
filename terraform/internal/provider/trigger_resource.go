package provider

import (
	"context"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
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

	slessclient "github.com/kube5s/sless/pkg/client"
)

type triggerResource struct{ base }

func newTriggerResource() resource.Resource { return &triggerResource{} }

var (
	_ resource.ResourceWithImportState    = (*triggerResource)(nil)
	_ resource.ResourceWithValidateConfig = (*triggerResource)(nil)
)

type httpModel struct {
	Path    types.String `tfsdk:"path"`
	Methods types.List   `tfsdk:"methods"`
	Auth    types.String `tfsdk:"auth"`
}

type cronModel struct {
	Schedule                types.String `tfsdk:"schedule"`
	TimeZone                types.String `tfsdk:"time_zone"`
	ConcurrencyPolicy       types.String `tfsdk:"concurrency_policy"`
	StartingDeadlineSeconds types.Int64  `tfsdk:"starting_deadline_seconds"`
	Payload                 types.String `tfsdk:"payload"`
	PreWarmSeconds          types.String `tfsdk:"pre_warm_seconds"`
}

type secretRefModel struct {
	Secret types.String `tfsdk:"secret"`
	Key    types.String `tfsdk:"key"`
}

type queueModel struct {
	Queue           types.String    `tfsdk:"queue"`
	Exchange        types.String    `tfsdk:"exchange"`
	RoutingKey      types.String    `tfsdk:"routing_key"`
	BrokerSecret    *secretRefModel `tfsdk:"broker_secret"`
	Concurrency     types.Int64     `tfsdk:"concurrency"`
	MaxRetries      types.Int64     `tfsdk:"max_retries"`
	BackoffInitial  types.Int64     `tfsdk:"backoff_initial_seconds"`
	BackoffMax      types.Int64     `tfsdk:"backoff_max_seconds"`
	DeadLetterQueue types.String    `tfsdk:"dead_letter_queue"`
}

type triggerModel struct {
	ID       types.String `tfsdk:"id"`
	Tenant   types.String `tfsdk:"tenant"`
	Name     types.String `tfsdk:"name"`
	Function types.String `tfsdk:"function"`
	Type     types.String `tfsdk:"type"`
	Enabled  types.Bool   `tfsdk:"enabled"`
	HTTP     *httpModel   `tfsdk:"http"`
	Cron     *cronModel   `tfsdk:"cron"`
	Queue    *queueModel  `tfsdk:"queue"`
	URL      types.String `tfsdk:"url"`
	Phase    types.String `tfsdk:"phase"`
}

func (r *triggerResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_trigger"
}

func computedString(desc string) schema.StringAttribute {
	return schema.StringAttribute{Optional: true, Computed: true, Description: desc,
		PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()}}
}

func (r *triggerResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A trigger that calls a function: an HTTP route under `/fn/<tenant>/`, a cron schedule, or a RabbitMQ queue. Set the block that matches `type`.",
		Attributes: map[string]schema.Attribute{
			"id":     idAttribute(),
			"tenant": tenantAttribute(),
			"name":   nameAttribute("trigger", 63),
			"function": schema.StringAttribute{
				Required: true, Description: "The function it calls (in the same tenant).", Validators: nameValidators(63),
			},
			"type": schema.StringAttribute{
				Required: true, Description: "`http`, `cron` or `queue`.",
				Validators: []validator.String{stringvalidator.OneOf("http", "cron", "queue")},
			},
			"enabled": schema.BoolAttribute{
				Optional: true, Computed: true, Description: "Whether it fires (default true).",
				PlanModifiers: []planmodifier.Bool{boolplanmodifier.UseStateForUnknown()},
			},
			"http": schema.SingleNestedAttribute{
				Optional: true, Description: "For `type = \"http\"`.",
				Attributes: map[string]schema.Attribute{
					"path": schema.StringAttribute{Required: true, Description: "The route under `/fn/<tenant>`, starting with `/`."},
					"methods": schema.ListAttribute{Optional: true, ElementType: types.StringType,
						Description: "The methods it answers (default all)."},
					"auth": computedString("`token` (default: a tenant token is required) or `none` (public)."),
				},
			},
			"cron": schema.SingleNestedAttribute{
				Optional: true, Description: "For `type = \"cron\"`.",
				Attributes: map[string]schema.Attribute{
					"schedule":           schema.StringAttribute{Required: true, Description: "Five cron fields, or `@hourly`, `@every 30s`, ..."},
					"time_zone":          computedString("An IANA time zone (default UTC)."),
					"concurrency_policy": computedString("`Allow` or `Forbid` overlapping runs."),
					"starting_deadline_seconds": schema.Int64Attribute{Optional: true, Computed: true,
						Description:   "How late a missed fire may still run.",
						PlanModifiers: []planmodifier.Int64{int64planmodifier.UseStateForUnknown()}},
					"payload": schema.StringAttribute{Optional: true, Description: "The JSON body each fire sends (use jsonencode)."},
					"pre_warm_seconds": schema.StringAttribute{Optional: true,
						Description: "How long before each fire one replica is kept ready, also at min_replicas 0: whole seconds, or `auto`; at most 300 s."},
				},
			},
			"queue": schema.SingleNestedAttribute{
				Optional: true, Description: "For `type = \"queue\"`.",
				Attributes: map[string]schema.Attribute{
					"queue":       schema.StringAttribute{Required: true, Description: "The queue consumed (in the tenant's vhost unless broker_secret names another broker)."},
					"exchange":    schema.StringAttribute{Optional: true, Description: "An exchange the queue is bound to."},
					"routing_key": schema.StringAttribute{Optional: true, Description: "The binding's routing key."},
					"broker_secret": schema.SingleNestedAttribute{Optional: true,
						Description: "A Secret key holding an amqp:// URL of an external broker.",
						Attributes: map[string]schema.Attribute{
							"secret": schema.StringAttribute{Required: true, Description: "The Secret's name."},
							"key":    schema.StringAttribute{Required: true, Description: "The key in the Secret."},
						}},
					"concurrency":             optionalInt("Messages handled at once."),
					"max_retries":             optionalInt("Retries before a message is dead-lettered."),
					"backoff_initial_seconds": optionalInt("First retry delay."),
					"backoff_max_seconds":     optionalInt("Longest retry delay."),
					"dead_letter_queue":       schema.StringAttribute{Optional: true, Description: "Where exhausted messages go."},
				},
			},
			"url": schema.StringAttribute{Computed: true, Description: "For http triggers, the public URL.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()}},
			"phase": schema.StringAttribute{Computed: true, Description: "The trigger's phase.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()}},
		},
	}
}

func optStr(v types.String) string {
	if v.IsNull() || v.IsUnknown() {
		return ""
	}
	return v.ValueString()
}

// input is the trigger the plan asks for, as the API creates it.
func (m *triggerModel) input(ctx context.Context, diags *diag.Diagnostics) slessclient.TriggerInput {
	in := slessclient.TriggerInput{Name: m.Name.ValueString(), Function: m.Function.ValueString(), Type: slessclient.TriggerInputType(m.Type.ValueString())}
	if !m.Enabled.IsNull() && !m.Enabled.IsUnknown() {
		in.Enabled = new(m.Enabled.ValueBool())
	}
	if h := m.HTTP; h != nil {
		in.Http = &slessclient.HTTPTrigger{Path: h.Path.ValueString(), Auth: optional[slessclient.HTTPTriggerAuth](h.Auth)}
		if !h.Methods.IsNull() && !h.Methods.IsUnknown() {
			var methods []string
			diags.Append(h.Methods.ElementsAs(ctx, &methods, false)...)
			if len(methods) > 0 {
				ms := make([]slessclient.HTTPTriggerMethods, len(methods))
				for i, v := range methods {
					ms[i] = slessclient.HTTPTriggerMethods(v)
				}
				in.Http.Methods = &ms
			}
		}
	}
	if c := m.Cron; c != nil {
		in.Cron = &slessclient.CronTrigger{Schedule: c.Schedule.ValueString(), TimeZone: optional[string](c.TimeZone),
			ConcurrencyPolicy: optional[slessclient.CronTriggerConcurrencyPolicy](c.ConcurrencyPolicy),
			Payload:           jsonAttr(c.Payload, "cron.payload", diags), PreWarmSeconds: optional[string](c.PreWarmSeconds)}
		if !c.StartingDeadlineSeconds.IsNull() && !c.StartingDeadlineSeconds.IsUnknown() {
			in.Cron.StartingDeadlineSeconds = new(c.StartingDeadlineSeconds.ValueInt64())
		}
	}
	if q := m.Queue; q != nil {
		in.Queue = &slessclient.QueueTrigger{Queue: q.Queue.ValueString(), Exchange: optional[string](q.Exchange), RoutingKey: optional[string](q.RoutingKey),
			Concurrency: i32(q.Concurrency), MaxRetries: i32(q.MaxRetries), BackoffInitialSeconds: i32(q.BackoffInitial), BackoffMaxSeconds: i32(q.BackoffMax),
			DeadLetterQueue: optional[string](q.DeadLetterQueue)}
		if b := q.BrokerSecret; b != nil {
			in.Queue.BrokerSecret = &slessclient.SecretRef{Secret: b.Secret.ValueString(), Key: b.Key.ValueString()}
		}
	}
	return in
}

// triggerReplacement is the spec of in as PUT replaces it: the input
// without its name.
func triggerReplacement(in slessclient.TriggerInput) slessclient.TriggerReplacement {
	return slessclient.TriggerReplacement{Function: in.Function, Type: slessclient.TriggerReplacementType(in.Type), Enabled: in.Enabled,
		Http: in.Http, Cron: in.Cron, Queue: in.Queue}
}

// keepStr is the server's value, or null where the server has none and
// the configuration set none.
func keepStr(prior types.String, got string) types.String {
	if got == "" && (prior.IsNull() || prior.IsUnknown()) {
		return types.StringNull()
	}
	return types.StringValue(got)
}

func (m *triggerModel) fill(ctx context.Context, t *slessclient.Trigger, diags *diag.Diagnostics) {
	m.ID = types.StringValue(m.Tenant.ValueString() + "/" + t.Name)
	m.Name, m.Function, m.Type = types.StringValue(t.Name), types.StringValue(t.Function), types.StringValue(string(t.Type))
	m.Enabled = types.BoolValue(t.Enabled == nil || *t.Enabled)
	if h := t.Http; h != nil {
		prior := m.HTTP
		if prior == nil {
			prior = &httpModel{Methods: types.ListNull(types.StringType), Auth: types.StringNull()}
		}
		n := &httpModel{Path: types.StringValue(h.Path), Auth: keepStr(prior.Auth, string(deref(h.Auth))), Methods: types.ListNull(types.StringType)}
		if methods := deref(h.Methods); len(methods) > 0 {
			v, d := types.ListValueFrom(ctx, types.StringType, methods)
			diags.Append(d...)
			n.Methods = v
		}
		m.HTTP = n
	} else {
		m.HTTP = nil
	}
	if c := t.Cron; c != nil {
		prior := m.Cron
		if prior == nil {
			prior = &cronModel{TimeZone: types.StringNull(), ConcurrencyPolicy: types.StringNull(), Payload: types.StringNull(), StartingDeadlineSeconds: types.Int64Null(),
				PreWarmSeconds: types.StringNull()}
		}
		n := &cronModel{Schedule: types.StringValue(c.Schedule), TimeZone: keepStr(prior.TimeZone, deref(c.TimeZone)),
			ConcurrencyPolicy: keepStr(prior.ConcurrencyPolicy, string(deref(c.ConcurrencyPolicy))), Payload: jsonValue(prior.Payload, c.Payload, diags),
			StartingDeadlineSeconds: types.Int64Null(), PreWarmSeconds: types.StringNull()}
		if c.PreWarmSeconds != nil && *c.PreWarmSeconds != "" {
			n.PreWarmSeconds = types.StringValue(*c.PreWarmSeconds)
		}
		if c.StartingDeadlineSeconds != nil {
			n.StartingDeadlineSeconds = types.Int64Value(*c.StartingDeadlineSeconds)
		}
		m.Cron = n
	} else {
		m.Cron = nil
	}
	if q := t.Queue; q != nil {
		n := &queueModel{Queue: types.StringValue(q.Queue), Exchange: str(deref(q.Exchange)), RoutingKey: str(deref(q.RoutingKey)),
			Concurrency: i64(q.Concurrency), MaxRetries: i64(q.MaxRetries), BackoffInitial: i64(q.BackoffInitialSeconds), BackoffMax: i64(q.BackoffMaxSeconds),
			DeadLetterQueue: str(deref(q.DeadLetterQueue))}
		if b := q.BrokerSecret; b != nil {
			n.BrokerSecret = &secretRefModel{Secret: types.StringValue(b.Secret), Key: types.StringValue(b.Key)}
		}
		m.Queue = n
	} else {
		m.Queue = nil
	}
	m.URL, m.Phase = str(deref(t.Status.Url)), str(deref(t.Status.Phase))
}

func (r *triggerResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan triggerModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	tenant := r.tenantOf(plan.Tenant, &resp.Diagnostics)
	in := plan.input(ctx, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	plan.Tenant = types.StringValue(tenant)
	t, err := r.data.client.createTrigger(ctx, tenant, in)
	if err != nil {
		resp.Diagnostics.AddError("Cannot create the trigger", err.Error())
		return
	}
	t = r.settle(ctx, tenant, t)
	plan.fill(ctx, t, &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

// settle gives the operator a moment (up to 30s) to reconcile a new or
// changed trigger, so that its phase and, for http, its url are in the
// state after apply rather than on the next refresh. A trigger whose
// function is not Ready yet stays as it is: that is not an error.
func (r *triggerResource) settle(ctx context.Context, tenant string, t *slessclient.Trigger) *slessclient.Trigger {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if deref(t.Status.Phase) != "" && (t.Type != slessclient.TriggerTypeHttp || deref(t.Status.Url) != "") {
			return t
		}
		select {
		case <-ctx.Done():
			return t
		case <-time.After(500 * time.Millisecond):
		}
		if got, err := r.data.client.getTrigger(ctx, tenant, t.Name); err == nil {
			t = got
		}
	}
	return t
}

func (r *triggerResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state triggerModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	t, err := r.data.client.getTrigger(ctx, state.Tenant.ValueString(), state.Name.ValueString())
	if isNotFound(err) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		resp.Diagnostics.AddError("Cannot read the trigger", err.Error())
		return
	}
	state.fill(ctx, t, &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

func (r *triggerResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state triggerModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	spec := triggerReplacement(plan.input(ctx, &resp.Diagnostics))
	if resp.Diagnostics.HasError() {
		return
	}
	plan.Tenant = state.Tenant
	t, err := r.data.client.putTrigger(ctx, state.Tenant.ValueString(), state.Name.ValueString(), spec)
	if err != nil {
		resp.Diagnostics.AddError("Cannot update the trigger", err.Error())
		return
	}
	t = r.settle(ctx, state.Tenant.ValueString(), t)
	plan.fill(ctx, t, &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *triggerResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state triggerModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	c := r.data.client
	tenant, name := state.Tenant.ValueString(), state.Name.ValueString()
	if err := c.deleteTrigger(ctx, tenant, name); err != nil && !isNotFound(err) {
		resp.Diagnostics.AddError("Cannot delete the trigger", err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(ctx, defaultDeleteTimeout)
	defer cancel()
	if err := waitGone(ctx, "trigger "+tenant+"/"+name, func(ctx context.Context) error {
		_, err := c.getTrigger(ctx, tenant, name)
		return err
	}); err != nil {
		resp.Diagnostics.AddError("The trigger was not deleted", err.Error())
	}
}

func (r *triggerResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importTenantName(ctx, req, resp)
}

// ValidateConfig: the block matching type must be set, and no other.
func (r *triggerResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var m triggerModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || m.Type.IsUnknown() {
		return
	}
	set := map[string]bool{"http": m.HTTP != nil, "cron": m.Cron != nil, "queue": m.Queue != nil}
	for kind, ok := range set {
		if kind == m.Type.ValueString() && !ok {
			resp.Diagnostics.AddAttributeError(path.Root(kind), "Missing "+kind+" block", "A trigger of type "+kind+" needs its "+kind+" block.")
		}
		if kind != m.Type.ValueString() && ok {
			resp.Diagnostics.AddAttributeError(path.Root(kind), "Unexpected "+kind+" block", "A trigger of type "+m.Type.ValueString()+" takes no "+kind+" block.")
		}
	}
}

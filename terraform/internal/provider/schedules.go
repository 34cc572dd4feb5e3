package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/listvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	slessclient "github.com/kube5s/sless/pkg/client"
)

// scheduleType is one entry of scaling_schedules.
var scheduleType = types.ObjectType{AttrTypes: map[string]attr.Type{
	"cron": types.StringType, "time_zone": types.StringType, "duration_seconds": types.Int64Type, "min_replicas": types.Int64Type,
}}

type scheduleModel struct {
	Cron            types.String `tfsdk:"cron"`
	TimeZone        types.String `tfsdk:"time_zone"`
	DurationSeconds types.Int64  `tfsdk:"duration_seconds"`
	MinReplicas     types.Int64  `tfsdk:"min_replicas"`
}

// schedulesAttribute is the function's scaling_schedules: the platform
// checks each cron expression and time zone with the cron triggers'
// rules, and an apply it refuses fails naming the entry.
func schedulesAttribute() schema.ListNestedAttribute {
	return schema.ListNestedAttribute{
		Optional: true,
		Description: "Scaling: floors of replicas for a while from each start of a cron schedule (business hours); the highest floor that holds counts. " +
			"Omitted: none.",
		Validators: []validator.List{listvalidator.SizeBetween(1, 10)},
		NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
			"cron": schema.StringAttribute{
				Required: true, Description: "When the floor starts: five fields or a descriptor (@daily, @every 1h), as a cron trigger's schedule.",
				Validators: []validator.String{stringvalidator.LengthBetween(1, 128)},
			},
			"time_zone": schema.StringAttribute{
				Optional: true, Description: "An IANA zone name the schedule is read in; null: UTC.",
				Validators: []validator.String{stringvalidator.LengthBetween(1, 64)},
			},
			"duration_seconds": schema.Int64Attribute{
				Required: true, Description: "How long the floor holds from each start, in elapsed time (1-604800).",
				Validators: []validator.Int64{int64validator.Between(1, 604800)},
			},
			"min_replicas": schema.Int64Attribute{
				Required: true, Description: "The floor while it holds (1-100).",
				Validators: []validator.Int64{int64validator.Between(1, 100)},
			},
		}},
	}
}

// schedulesInput is the configured list as the API takes it (nil: none).
func schedulesInput(ctx context.Context, v types.List, diags *diag.Diagnostics) *[]slessclient.ScalingSchedule {
	if v.IsNull() || v.IsUnknown() {
		return nil
	}
	var ms []scheduleModel
	diags.Append(v.ElementsAs(ctx, &ms, false)...)
	out := make([]slessclient.ScalingSchedule, 0, len(ms))
	for _, m := range ms {
		s := slessclient.ScalingSchedule{Cron: m.Cron.ValueString(), DurationSeconds: int32(m.DurationSeconds.ValueInt64()),
			MinReplicas: int32(m.MinReplicas.ValueInt64())}
		if !m.TimeZone.IsNull() && !m.TimeZone.IsUnknown() {
			s.TimeZone = new(m.TimeZone.ValueString())
		}
		out = append(out, s)
	}
	return &out
}

// schedulesState is the server's list as the state holds it (null: none).
func schedulesState(in *[]slessclient.ScalingSchedule, diags *diag.Diagnostics) types.List {
	if in == nil || len(*in) == 0 {
		return types.ListNull(scheduleType)
	}
	elems := make([]attr.Value, 0, len(*in))
	for _, s := range *in {
		tz := types.StringNull()
		if s.TimeZone != nil && *s.TimeZone != "" {
			tz = types.StringValue(*s.TimeZone)
		}
		o, d := types.ObjectValue(scheduleType.AttrTypes, map[string]attr.Value{"cron": types.StringValue(s.Cron), "time_zone": tz,
			"duration_seconds": types.Int64Value(int64(s.DurationSeconds)), "min_replicas": types.Int64Value(int64(s.MinReplicas))})
		diags.Append(d...)
		elems = append(elems, o)
	}
	v, d := types.ListValue(scheduleType, elems)
	diags.Append(d...)
	return v
}

package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/listvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"

	slessclient "github.com/kube5s/sless/pkg/client"
)

// A function's traffic (docs/versions.md): the split of its untagged calls
// over its versions, as PUT .../traffic takes it. The provider manages it
// only when the configuration has a traffic list: without one the state
// holds null and the split is the platform's (100 % latest, or what
// `sless traffic set` or `sless rollback` made it), as a deploy keeps it.
// Dropping the list from the configuration gives the split back to the
// platform's default. The API judges a split (the sum, the versions that
// exist, repeated tags); the plan checks only each entry's shape.

type trafficEntry struct {
	Version types.Int64  `tfsdk:"version"`
	Latest  types.Bool   `tfsdk:"latest"`
	Percent types.Int64  `tfsdk:"percent"`
	Tag     types.String `tfsdk:"tag"`
}

var trafficEntryType = types.ObjectType{AttrTypes: map[string]attr.Type{
	"version": types.Int64Type, "latest": types.BoolType, "percent": types.Int64Type, "tag": types.StringType,
}}

func trafficAttribute() schema.ListNestedAttribute {
	return schema.ListNestedAttribute{
		Optional: true,
		Description: "The split of untagged calls over the function's versions, and the tags that route to a version " +
			"(PUT .../traffic; docs/versions.md). The percents sum to 100 and a version must be published: the platform checks, and an apply it refuses fails naming the entry and changes no traffic. " +
			"Applied after the code serves, so that an entry may name the version the same apply publishes (`latest = true` follows each new version by itself). " +
			"Omitted: the platform's split (100 % latest, or what `sless traffic set` or `sless rollback` set) is left alone; removing the list sets the split back to 100 % latest.",
		Validators: []validator.List{listvalidator.SizeAtLeast(1)},
		NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
			"version": schema.Int64Attribute{
				Optional: true, Description: "A published version number. Exactly one of `version` and `latest = true`.",
				Validators: []validator.Int64{int64validator.AtLeast(1)},
			},
			"latest": schema.BoolAttribute{
				Optional: true, Description: "`true`: the newest published version, whichever it is when a call comes.",
			},
			"percent": schema.Int64Attribute{
				Required: true, Description: "This entry's share of untagged calls (0-100).",
				Validators: []validator.Int64{int64validator.Between(0, 100)},
			},
			"tag": schema.StringAttribute{
				Optional: true, Description: "A stable route to this entry's version, even at 0 %: invoke `<name>@<tag>`, or the header `X-Sless-Route: <tag>`. Unique in the function.",
			},
		}},
	}
}

// validateTraffic checks each known entry names exactly one of a version
// and latest.
func validateTraffic(ctx context.Context, v types.List, diags *diag.Diagnostics) {
	if v.IsNull() || v.IsUnknown() {
		return
	}
	for i, e := range v.Elements() {
		o, ok := e.(types.Object)
		if !ok || o.IsNull() || o.IsUnknown() {
			continue
		}
		var t trafficEntry
		diags.Append(o.As(ctx, &t, basetypes.ObjectAsOptions{})...)
		if t.Version.IsUnknown() || t.Latest.IsUnknown() {
			continue
		}
		at := path.Root("traffic").AtListIndex(i)
		switch version, latest := !t.Version.IsNull(), t.Latest.ValueBool(); {
		case version && latest:
			diags.AddAttributeError(at, "Invalid traffic entry",
				fmt.Sprintf("traffic[%d] names both version %d and latest; name one.", i, t.Version.ValueInt64()))
		case !version && !latest:
			diags.AddAttributeError(at, "Invalid traffic entry",
				fmt.Sprintf("traffic[%d] names neither a version nor latest: set version = N or latest = true.", i))
		}
	}
}

// trafficTargets is the split v says, as the API takes it (nil for null).
func trafficTargets(ctx context.Context, v types.List, diags *diag.Diagnostics) []slessclient.TrafficTarget {
	if v.IsNull() || v.IsUnknown() {
		return nil
	}
	var entries []trafficEntry
	diags.Append(v.ElementsAs(ctx, &entries, false)...)
	out := make([]slessclient.TrafficTarget, 0, len(entries))
	for _, e := range entries {
		t := slessclient.TrafficTarget{Percent: int32(e.Percent.ValueInt64()), Version: i32(e.Version), Tag: optional[string](e.Tag)}
		if e.Latest.ValueBool() {
			t.Latest = new(true)
		}
		out = append(out, t)
	}
	return out
}

// sameTraffic says whether two splits are the same, entry by entry (an
// absent latest or tag is the same as false or empty).
func sameTraffic(a, b []slessclient.TrafficTarget) bool {
	norm := func(ts []slessclient.TrafficTarget) string {
		out := make([]slessclient.TrafficTarget, 0, len(ts))
		for _, t := range ts {
			n := slessclient.TrafficTarget{Percent: t.Percent, Version: t.Version}
			if deref(t.Latest) {
				n.Latest = new(true)
			}
			if deref(t.Tag) != "" {
				n.Tag = t.Tag
			}
			out = append(out, n)
		}
		b, _ := json.Marshal(out)
		return string(b)
	}
	return norm(a) == norm(b)
}

// trafficValue is the API's split as the state holds it: null when the
// function has none (the platform's default), else its entries; prior's
// value when it says the same split, so that `latest = false` or
// `tag = ""` as configured plan nothing.
func trafficValue(ctx context.Context, prior types.List, api *[]slessclient.TrafficTarget, diags *diag.Diagnostics) types.List {
	got := deref(api)
	if len(got) == 0 {
		return types.ListNull(trafficEntryType)
	}
	if !prior.IsNull() && !prior.IsUnknown() {
		var d diag.Diagnostics
		if sameTraffic(trafficTargets(ctx, prior, &d), got) && !d.HasError() {
			return prior
		}
	}
	entries := make([]attr.Value, 0, len(got))
	for _, t := range got {
		latest := types.BoolNull()
		if deref(t.Latest) {
			latest = types.BoolValue(true)
		}
		o, d := types.ObjectValue(trafficEntryType.AttrTypes, map[string]attr.Value{
			"version": versionNumber(t.Version), "latest": latest, "percent": types.Int64Value(int64(t.Percent)), "tag": str(deref(t.Tag)),
		})
		diags.Append(d...)
		entries = append(entries, o)
	}
	v, d := types.ListValue(trafficEntryType, entries)
	diags.Append(d...)
	return v
}

// trafficLocation is an API problem's location in a traffic body
// (body.traffic, body.traffic[1], body.traffic[0].tag).
var trafficLocation = regexp.MustCompile(`^body\.traffic(?:\[(\d+)\])?(?:\.([a-z_]+))?$`)

// trafficProblem turns the API's refusal of a split (422, each reason
// with its location) into diagnostics on the entries it names; any other
// error is one diagnostic.
func trafficProblem(err error, diags *diag.Diagnostics) {
	const summary = "The platform refused the traffic split"
	var p *slessclient.Problem
	if !errors.As(err, &p) || p.Status != http.StatusUnprocessableEntity || len(p.Errors) == 0 {
		diags.AddError("Cannot set the function's traffic", err.Error())
		return
	}
	for _, e := range p.Errors {
		m := trafficLocation.FindStringSubmatch(e.Location)
		if m == nil {
			diags.AddError(summary, fmt.Sprintf("%s: %s (%s)", e.Location, e.Message, err))
			continue
		}
		at, name := path.Root("traffic"), "traffic"
		if m[1] != "" {
			i, _ := strconv.Atoi(m[1])
			at, name = at.AtListIndex(i), fmt.Sprintf("traffic[%d]", i)
		}
		if m[2] != "" {
			at, name = at.AtName(m[2]), name+"."+m[2]
		}
		detail := name + ": " + e.Message
		if p.RequestID != "" {
			detail += " (request " + p.RequestID + ")"
		}
		diags.AddAttributeError(at, summary, detail+". The function's traffic was not changed.")
	}
}

// trafficChange says what an apply does to the traffic: put (the list),
// reset (back to the platform's default) or nothing.
func trafficChange(ctx context.Context, planned, had types.List, diags *diag.Diagnostics) (put []slessclient.TrafficTarget, reset bool) {
	switch {
	case planned.IsNull():
		return nil, !had.IsNull()
	case had.IsNull():
		return trafficTargets(ctx, planned, diags), false
	}
	want := trafficTargets(ctx, planned, diags)
	if sameTraffic(want, trafficTargets(ctx, had, diags)) {
		return nil, false
	}
	return want, false
}

// applyTraffic makes the function's split what m.Traffic says, had being
// the split the state holds, once its code serves (m.SourceSHA256), and
// waits until the platform serves it (the gateway's wait=ready: the
// operator flips status.serving once every version with a share is
// ready). A refused split leaves m.Traffic at had.
func (r *functionResource) applyTraffic(ctx context.Context, m *functionModel, had types.List, diags *diag.Diagnostics) {
	put, reset := trafficChange(ctx, m.Traffic, had, diags)
	if diags.HasError() || (put == nil && !reset) {
		return
	}
	c := r.data.client
	tenant, name := m.Tenant.ValueString(), m.Name.ValueString()
	var err error
	if reset {
		err = c.resetTraffic(ctx, tenant, name)
	} else {
		err = c.setTraffic(ctx, tenant, name, put)
	}
	if err != nil {
		m.Traffic = had
		trafficProblem(err, diags)
		return
	}
	f, err := waitFunctionReady(ctx, c, tenant, name, m.SourceSHA256.ValueString())
	if f != nil {
		planned := m.Traffic
		m.fill(f, diags)
		m.Traffic = trafficValue(ctx, planned, f.Traffic, diags)
	}
	if err != nil {
		diags.AddError("The function's new traffic split did not become ready", err.Error()+
			"\n\nThe platform keeps serving the previous split until every version with a share is ready.")
	}
}

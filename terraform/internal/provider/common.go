package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

var dnsLabel = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)

func nameValidators(max int) []validator.String {
	return []validator.String{
		stringvalidator.LengthBetween(1, max),
		stringvalidator.RegexMatches(dnsLabel, "must be a DNS-1123 label: lower-case letters, digits and '-', starting with a letter"),
	}
}

// base is what every resource shares: the provider's client and default tenant.
type base struct {
	data *providerData
}

func (b *base) configure(pd any, diags *diag.Diagnostics) {
	if pd == nil {
		return // the provider is not configured yet (validation)
	}
	d, ok := pd.(*providerData)
	if !ok {
		diags.AddError("Unexpected provider data", fmt.Sprintf("got %T", pd))
		return
	}
	b.data = d
}

func (b *base) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	b.configure(req.ProviderData, &resp.Diagnostics)
}

// tenantOf is the resource's tenant, or the provider's default.
func (b *base) tenantOf(v types.String, diags *diag.Diagnostics) string {
	if !v.IsNull() && !v.IsUnknown() && v.ValueString() != "" {
		return v.ValueString()
	}
	if b.data != nil && b.data.tenant != "" {
		return b.data.tenant
	}
	diags.AddAttributeError(path.Root("tenant"), "Missing tenant",
		"Set tenant on the resource, the provider's tenant attribute, or SLESS_TENANT.")
	return ""
}

// tenantAttribute is the optional tenant of a tenant-scoped resource:
// changing it replaces the resource.
func tenantAttribute() schema.StringAttribute {
	return schema.StringAttribute{
		Optional: true, Computed: true,
		Description:   "The tenant that owns the object. Defaults to the provider's tenant. Changing it replaces the object.",
		PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplaceIfConfigured(), stringplanmodifier.UseStateForUnknown()},
		Validators:    nameValidators(54),
	}
}

func nameAttribute(what string, max int) schema.StringAttribute {
	return schema.StringAttribute{
		Required:      true,
		Description:   "The " + what + "'s name, a DNS-1123 label unique in its tenant. Changing it replaces the " + what + ".",
		PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
		Validators:    nameValidators(max),
	}
}

func idAttribute() schema.StringAttribute {
	return schema.StringAttribute{
		Computed:      true,
		Description:   "`<tenant>/<name>`, the form `terraform import` takes.",
		PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
	}
}

// importTenantName imports `<tenant>/<name>` into the tenant and name attributes.
func importTenantName(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	tenant, name, ok := strings.Cut(req.ID, "/")
	if !ok || !dnsLabel.MatchString(tenant) || !dnsLabel.MatchString(name) {
		resp.Diagnostics.AddError("Invalid import ID", fmt.Sprintf("Import takes <tenant>/<name>, got %q.", req.ID))
		return
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), req.ID)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("tenant"), tenant)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("name"), name)...)
}

func i32(v types.Int64) *int32 {
	if v.IsNull() || v.IsUnknown() {
		return nil
	}
	n := int32(v.ValueInt64())
	return &n
}

func i64(p *int32) types.Int64 {
	if p == nil {
		return types.Int64Null()
	}
	return types.Int64Value(int64(*p))
}

// versionNumber is a version number of the API, null when absent (or 0).
func versionNumber(n *int32) types.Int64 {
	if n == nil || *n == 0 {
		return types.Int64Null()
	}
	return types.Int64Value(int64(*n))
}

// deref is what p points at, or T's zero value.
func deref[T any](p *T) T {
	var v T
	if p != nil {
		v = *p
	}
	return v
}

// optional is an optional string of the API: nil when v is null, unknown
// or empty, as the API's omitted fields are.
func optional[T ~string](v types.String) *T {
	if v.IsNull() || v.IsUnknown() || v.ValueString() == "" {
		return nil
	}
	s := T(v.ValueString())
	return &s
}

func str(s string) types.String {
	if s == "" {
		return types.StringNull()
	}
	return types.StringValue(s)
}

// jsonValue is a JSON document of the API (a payload, decoded as any) as
// text. It keeps the configured text when the server's is the same
// document (it may have reformatted it), so that a plan stays empty.
func jsonValue(prior types.String, doc any, diags *diag.Diagnostics) types.String {
	if doc == nil {
		return types.StringNull()
	}
	got, err := json.Marshal(doc)
	if err != nil {
		diags.AddError("Cannot read a JSON document of the API", err.Error())
		return types.StringNull()
	}
	if !prior.IsNull() && !prior.IsUnknown() && jsonEqual([]byte(prior.ValueString()), got) {
		return prior
	}
	return types.StringValue(string(got))
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

// jsonAttr reads a JSON text attribute as the API's payload fields take
// it: nil (no payload, omitted) when it is null, else the document.
func jsonAttr(v types.String, at string, diags *diag.Diagnostics) any {
	if v.IsNull() || v.IsUnknown() || v.ValueString() == "" {
		return nil
	}
	if !json.Valid([]byte(v.ValueString())) {
		diags.AddAttributeError(path.Root(at), "Invalid JSON", at+" must be a JSON document; use jsonencode().")
		return nil
	}
	return json.RawMessage(v.ValueString())
}

package api

import (
	"net/http/httptest"
	"testing"
)

// TestOnlyPlainInvokePathsAreServedOutsideTheRouter: serveInvoke takes a
// POST to the invoke route whose path the router would match as it is;
// every other request, escaped paths included, goes to the router.
func TestOnlyPlainInvokePathsAreServedOutsideTheRouter(t *testing.T) {
	cases := []struct {
		method, target string
		tenant, name   string // "" for the router
	}{
		{"POST", "/v1/tenants/acme/functions/hello/invoke", "acme", "hello"},
		{"POST", "/v1/tenants/acme/functions/hello@canary/invoke?version=2", "acme", "hello@canary"},
		{"GET", "/v1/tenants/acme/functions/hello/invoke", "", ""},
		{"PUT", "/v1/tenants/acme/functions/hello/invoke", "", ""},
		{"POST", "/v1/tenants/acme/functions/hello/invoke/", "", ""},
		{"POST", "/v1/tenants/acme/functions/hello/world/invoke", "", ""},
		{"POST", "/v1/tenants/acme/functions//invoke", "", ""},
		{"POST", "/v1/tenants//functions/hello/invoke", "", ""},
		{"POST", "/v1/tenants/acme/functions/hell%6F/invoke", "", ""},
		{"POST", "/v1/tenants/acme/functions/a%2Fb/invoke", "", ""},
		{"POST", "/v1/tenants/acme/function/hello/invoke", "", ""},
		{"POST", "/v1/tenants/acme/functions/hello", "", ""},
		{"POST", "/v2/tenants/acme/functions/hello/invoke", "", ""},
		{"POST", "/fn/acme/functions/hello/invoke", "", ""},
	}
	for _, c := range cases {
		r := httptest.NewRequest(c.method, c.target, nil)
		tenant, name, ok := invokeTarget(r)
		if ok != (c.tenant != "") || tenant != c.tenant || name != c.name {
			t.Errorf("%s %s: (%q, %q, %v), want (%q, %q)", c.method, c.target, tenant, name, ok, c.tenant, c.name)
		}
	}
}

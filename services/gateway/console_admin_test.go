package main

import (
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/kube5s/sless/pkg/testenv"
)

// issuedRE finds the token and its id on the page answering an issue.
var issuedRE = regexp.MustCompile(`id="issued-h">New token .*?\(<code>(tok-[0-9a-f]+)</code>\)</h2>(?s:.*?)id="new-token" type="text" value="(slt_[^"]+)"`)

// TestConsoleAdminManagesTenantsAndTokens: with the admin token (and no
// tenant) the console shows the tenants; a tenant is created, and deleted
// only once its name is typed (a wrong name changes nothing and says so);
// a token issued from the page is shown on the POST's answer and never
// again, lists as never used, and its revocation from the page ends the
// console session opened with it. A tenant's session finds no admin page.
func TestConsoleAdminManagesTenantsAndTokens(t *testing.T) {
	g := gateway(t)
	tenant, tok := g.tenant(t, nil)
	same := []string{"Sec-Fetch-Site", "same-origin"}

	// A tenant session: the admin pages do not exist, and change nothing.
	u := g.console(t)
	if r := u.login(t, tok, ""); r.status != http.StatusSeeOther {
		t.Fatalf("tenant login: %d %s", r.status, r.body)
	}
	for _, path := range []string{"/ui/admin/", "/ui/admin/tenants", "/ui/admin/tenants/" + tenant} {
		if r := u.do(t, "GET", path, nil); r.status != http.StatusNotFound {
			t.Errorf("tenant session GET %s: %d, want 404", path, r.status)
		}
	}
	for _, path := range []string{"/ui/admin/tenants/" + tenant + "/delete", "/ui/admin/tenants/" + tenant + "/tokens"} {
		if r := u.do(t, "POST", path, url.Values{"confirm": {tenant}, "name": {"x"}}, same...); r.status != http.StatusNotFound {
			t.Errorf("tenant session POST %s: %d, want 404", path, r.status)
		}
	}
	expect(t, g.call(t, "GET", "/v1/tenants/"+tenant, admin, nil), 200, "the tenant is still there")
	expect(t, g.call(t, "GET", "/v1/tenants/"+tenant+"/tokens", tok, nil), 403, "a tenant token listing its tokens")

	// The admin, without a tenant: the admin pages.
	a := g.console(t)
	r := a.login(t, admin, "")
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/ui/admin/tenants" {
		t.Fatalf("admin login: %d Location %q, want 303 to /ui/admin/tenants", r.status, r.header.Get("Location"))
	}
	if r := a.do(t, "GET", "/ui/functions", nil); r.status != http.StatusSeeOther || r.header.Get("Location") != "/ui/admin/tenants" {
		t.Errorf("an admin session without a tenant on /ui/functions: %d Location %q", r.status, r.header.Get("Location"))
	}
	victim := testenv.Name("t")
	r = a.do(t, "POST", "/ui/admin/tenants", url.Values{"name": {victim}, "display_name": {"<b>Victim</b>"}}, same...)
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/ui/admin/tenants/"+victim {
		t.Fatalf("create: %d Location %q %s", r.status, r.header.Get("Location"), r.body)
	}
	if r := a.do(t, "POST", "/ui/admin/tenants", url.Values{"name": {"Bad_Name"}}, same...); r.status != 422 || !strings.Contains(string(r.body), "The tenant was not created") {
		t.Errorf("create with a bad name: %d, want 422 saying so", r.status)
	}
	r = a.do(t, "GET", "/ui/admin/tenants", nil)
	expect(t, r, 200, "tenants page")
	for _, want := range []string{`href="/ui/admin/tenants/` + tenant + `"`, `action="/ui/admin/tenants/` + victim + `/delete"`, "&lt;b&gt;Victim&lt;/b&gt;"} {
		if !strings.Contains(string(r.body), want) {
			t.Errorf("the tenants page lacks %s:\n%s", want, r.body)
		}
	}

	for _, wrong := range []string{"", tenant, victim + "x"} {
		r = a.do(t, "POST", "/ui/admin/tenants/"+victim+"/delete", url.Values{"confirm": {wrong}}, same...)
		if r.status != http.StatusUnprocessableEntity || !strings.Contains(string(r.body), "nothing was deleted") {
			t.Errorf("delete confirmed with %q: %d, want 422 saying nothing was deleted", wrong, r.status)
		}
	}
	expect(t, g.call(t, "GET", "/v1/tenants/"+victim, admin, nil), 200, "the tenant after wrong confirmations")
	if r := a.do(t, "POST", "/ui/admin/tenants/"+victim+"/delete", url.Values{"confirm": {victim}}, "Sec-Fetch-Site", "cross-site"); r.status != http.StatusForbidden {
		t.Errorf("a cross-site delete: %d, want 403", r.status)
	}
	expect(t, g.call(t, "GET", "/v1/tenants/"+victim, admin, nil), 200, "the tenant after a cross-site delete")
	r = a.do(t, "POST", "/ui/admin/tenants/"+victim+"/delete", url.Values{"confirm": {victim}}, same...)
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/ui/admin/tenants" {
		t.Fatalf("delete: %d Location %q %s", r.status, r.header.Get("Location"), r.body)
	}
	expect(t, g.call(t, "GET", "/v1/tenants/"+victim, admin, nil), 404, "the deleted tenant")

	// A token, issued from the page: shown on the answer, once.
	r = a.do(t, "POST", "/ui/admin/tenants/"+tenant+"/tokens", url.Values{"name": {`<script>alert(1)</script>`}}, same...)
	expect(t, r, 200, "issue")
	m := issuedRE.FindStringSubmatch(string(r.body))
	if m == nil {
		t.Fatalf("the answer to the issue shows no token:\n%s", r.body)
	}
	id, newTok := m[1], m[2]
	if strings.Contains(string(r.body), "<script>alert") {
		t.Error("the token's name is markup on the page")
	}
	page := a.do(t, "GET", "/ui/admin/tenants/"+tenant, nil)
	expect(t, page, 200, "tenant page")
	if strings.Contains(string(page.body), newTok) {
		t.Error("the tenant's page shows the token again")
	}
	if !strings.Contains(string(page.body), "<code>"+id+"</code>") || !strings.Contains(string(page.body), `action="/ui/admin/tenants/`+tenant+`/tokens/`+id+`/revoke"`) {
		t.Errorf("the tenant's page does not list the token %s with a Revoke button:\n%s", id, page.body)
	}

	// The REST list: the token, never its secret.
	r = g.call(t, "GET", "/v1/tenants/"+tenant+"/tokens", admin, nil)
	expect(t, r, 200, "list tokens")
	if strings.Contains(string(r.body), newTok) || strings.Contains(string(r.body), "hash") {
		t.Errorf("the tokens list shows a secret: %s", r.body)
	}
	var listed struct {
		Items []map[string]any `json:"items"`
	}
	if err := json.Unmarshal(r.body, &listed); err != nil || len(listed.Items) != 2 || listed.Items[0]["id"] != id || listed.Items[0]["name"] != `<script>alert(1)</script>` {
		t.Errorf("tokens list %s (%v), want the new token first of 2", r.body, err)
	}

	// Its console session ends with its revocation from the page.
	v := g.console(t)
	if r := v.login(t, newTok, ""); r.status != http.StatusSeeOther {
		t.Fatalf("login with the issued token: %d %s", r.status, r.body)
	}
	expect(t, v.do(t, "GET", "/ui/functions", nil), 200, "the issued token's session")
	r = a.do(t, "POST", "/ui/admin/tenants/"+tenant+"/tokens/"+id+"/revoke", url.Values{}, same...)
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/ui/admin/tenants/"+tenant+"#tokens-h" {
		t.Fatalf("revoke: %d Location %q %s", r.status, r.header.Get("Location"), r.body)
	}
	if r := v.do(t, "GET", "/ui/functions", nil); r.status != http.StatusSeeOther || !strings.HasPrefix(r.header.Get("Location"), "/ui/login") {
		t.Errorf("after the revocation the session's page: %d Location %q, want 303 to the login", r.status, r.header.Get("Location"))
	}
	page = a.do(t, "GET", "/ui/admin/tenants/"+tenant, nil)
	if strings.Contains(string(page.body), `/tokens/`+id+`/revoke"`) {
		t.Error("the revoked token is still offered for revocation")
	}
	if r := a.do(t, "POST", "/ui/admin/tenants/"+tenant+"/tokens/"+id+"/revoke", url.Values{}, same...); r.status != http.StatusNotFound {
		t.Errorf("a second revoke: %d, want 404", r.status)
	}
	expect(t, u.do(t, "GET", "/ui/functions", nil), 200, "the other token's session")
}

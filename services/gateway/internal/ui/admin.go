package ui

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/kube5s/sless/services/gateway/internal/api"
)

// The admin pages (/ui/admin/...): the installation's tenants and each
// tenant's tokens, for a session opened with the admin token only; to any
// other session they do not exist (404). Like every page they call the
// REST API's own handlers, which authorize the admin once more.

// adminPageNames are the admin pages, templates/<name>.html on the layout.
var adminPageNames = []string{"admintenants", "admintenant"}

// registerAdmin adds the admin routes to m.
func (h *Handler) registerAdmin(m *http.ServeMux) {
	m.HandleFunc("GET /ui/admin/{$}", h.withAdmin(func(w http.ResponseWriter, r *http.Request, _ Session) {
		http.Redirect(w, r, "/ui/admin/tenants", http.StatusSeeOther)
	}))
	m.HandleFunc("GET /ui/admin/tenants", h.withAdmin(h.adminTenants))
	m.HandleFunc("POST /ui/admin/tenants", h.withAdmin(h.createTenant))
	m.HandleFunc("POST /ui/admin/tenants/{t}/delete", h.withAdmin(h.deleteTenant))
	m.HandleFunc("GET /ui/admin/tenants/{t}", h.withAdmin(h.adminTenant))
	m.HandleFunc("POST /ui/admin/tenants/{t}/tokens", h.withAdmin(h.issueToken))
	m.HandleFunc("POST /ui/admin/tenants/{t}/tokens/{id}/revoke", h.withAdmin(h.revokeToken))
}

// withAdmin serves next for an admin session; any other session gets the
// console's 404, as for a page that does not exist.
func (h *Handler) withAdmin(next sessionHandler) http.HandlerFunc {
	return h.withSession(func(w http.ResponseWriter, r *http.Request, s Session) {
		if !s.Admin {
			h.notFound(w, r)
			return
		}
		next(w, r, s)
	})
}

type adminTenantsView struct {
	Tenants []api.Tenant
	Next    string // the query of the next page
	Error   string
	// The create form, kept when the API refused it.
	Name, DisplayName string
}

func (h *Handler) adminTenants(w http.ResponseWriter, r *http.Request, s Session) {
	h.adminTenantsPage(w, r, s, http.StatusOK, adminTenantsView{})
}

// adminTenantsPage lists the tenants (GET /v1/tenants) under v's message.
func (h *Handler) adminTenantsPage(w http.ResponseWriter, r *http.Request, s Session, status int, v adminTenantsView) {
	q := url.Values{"limit": {"100"}}
	if c := r.URL.Query().Get("cursor"); c != "" {
		q.Set("cursor", c)
	}
	var page list[api.Tenant]
	if err := h.get(r, s, "/v1/tenants", q, &page); err != nil {
		h.fail(w, r, s, err)
		return
	}
	v.Tenants = page.Items
	if page.NextCursor != "" {
		v.Next = url.Values{"cursor": {page.NextCursor}}.Encode()
	}
	h.render(w, r, status, "admintenants", Page{Title: "Tenants", Session: &s, Nav: "tenants", Data: v})
}

// readForm reads a small form of an admin action; a form that cannot be
// read is answered here.
func (h *Handler) readForm(w http.ResponseWriter, r *http.Request, s Session) bool {
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	if err := r.ParseForm(); err != nil {
		h.fail(w, r, s, &apiError{Status: http.StatusBadRequest, Detail: "the form could not be read"})
		return false
	}
	return true
}

// createTenant creates a tenant (POST /v1/tenants), then shows its tokens
// page, where its first token is issued.
func (h *Handler) createTenant(w http.ResponseWriter, r *http.Request, s Session) {
	if !h.readForm(w, r, s) {
		return
	}
	v := adminTenantsView{Name: strings.TrimSpace(r.PostForm.Get("name")), DisplayName: strings.TrimSpace(r.PostForm.Get("display_name"))}
	in := api.TenantInput{Name: v.Name, DisplayName: v.DisplayName}
	body, _ := json.Marshal(in)
	res := h.call(r, s, http.MethodPost, "/v1/tenants", nil, body, http.Header{"Content-Type": {"application/json"}}, 1<<20)
	if res.Status/100 != 2 {
		p := problemOf(res)
		if p.Status/100 != 4 {
			h.fail(w, r, s, p)
			return
		}
		v.Error = "The tenant was not created: " + p.Detail
		h.adminTenantsPage(w, r, s, p.Status, v)
		return
	}
	http.Redirect(w, r, "/ui/admin/tenants/"+url.PathEscape(v.Name), http.StatusSeeOther)
}

// deleteTenant deletes a tenant (DELETE /v1/tenants/{t}) only when the
// form's confirmation is its name typed again; otherwise nothing changes
// and the page says so.
func (h *Handler) deleteTenant(w http.ResponseWriter, r *http.Request, s Session) {
	t := r.PathValue("t")
	if !h.readForm(w, r, s) {
		return
	}
	if r.PostForm.Get("confirm") != t {
		h.adminTenantsPage(w, r, s, http.StatusUnprocessableEntity, adminTenantsView{
			Error: "The name typed does not match the tenant " + t + "; nothing was deleted."})
		return
	}
	res := h.call(r, s, http.MethodDelete, v1TenantPath(t), nil, nil, nil, 1<<20)
	if res.Status/100 != 2 {
		h.fail(w, r, s, problemOf(res))
		return
	}
	http.Redirect(w, r, "/ui/admin/tenants", http.StatusSeeOther)
}

// issuedToken is a token as the page answering its issue shows it, once.
type issuedToken struct {
	ID, Name, Token string
}

type adminTenantView struct {
	Tenant   api.Tenant
	Tokens   []api.Token
	Next     string
	Issued   *issuedToken
	Error    string
	FormName string
}

func (h *Handler) adminTenant(w http.ResponseWriter, r *http.Request, s Session) {
	h.adminTenantPage(w, r, s, http.StatusOK, adminTenantView{})
}

// adminTenantPage shows a tenant (GET /v1/tenants/{t}) and its tokens
// (GET /v1/tenants/{t}/tokens).
func (h *Handler) adminTenantPage(w http.ResponseWriter, r *http.Request, s Session, status int, v adminTenantView) {
	t := r.PathValue("t")
	if err := h.get(r, s, v1TenantPath(t), nil, &v.Tenant); err != nil {
		h.fail(w, r, s, err)
		return
	}
	q := url.Values{"limit": {"100"}}
	if c := r.URL.Query().Get("cursor"); c != "" && r.Method == http.MethodGet {
		q.Set("cursor", c)
	}
	var page list[api.Token]
	if err := h.get(r, s, v1TenantPath(t, "tokens"), q, &page); err != nil {
		h.fail(w, r, s, err)
		return
	}
	v.Tokens = page.Items
	if page.NextCursor != "" {
		v.Next = url.Values{"cursor": {page.NextCursor}}.Encode()
	}
	h.render(w, r, status, "admintenant", Page{Title: "Tenant " + v.Tenant.Name, Session: &s, Nav: "tenants", Data: v})
}

// issueToken issues a token (POST /v1/tenants/{t}/tokens) and answers
// with the tenant's page showing it: the only time it is ever shown (no
// redirect, so it is in no URL or history entry; responses are no-store).
func (h *Handler) issueToken(w http.ResponseWriter, r *http.Request, s Session) {
	t := r.PathValue("t")
	if !h.readForm(w, r, s) {
		return
	}
	name := strings.TrimSpace(r.PostForm.Get("name"))
	body, _ := json.Marshal(map[string]string{"name": name})
	res := h.call(r, s, http.MethodPost, v1TenantPath(t, "tokens"), nil, body, http.Header{"Content-Type": {"application/json"}}, 1<<20)
	if res.Status/100 != 2 {
		p := problemOf(res)
		if p.Status/100 != 4 || p.Status == http.StatusNotFound {
			h.fail(w, r, s, p)
			return
		}
		h.adminTenantPage(w, r, s, p.Status, adminTenantView{Error: "No token was issued: " + p.Detail, FormName: name})
		return
	}
	var out struct {
		ID    string `json:"id"`
		Name  string `json:"name"`
		Token string `json:"token"`
	}
	if err := json.Unmarshal(res.Body, &out); err != nil || out.Token == "" {
		h.fail(w, r, s, errors.New("the API's answer to a token's issue could not be read"))
		return
	}
	h.adminTenantPage(w, r, s, http.StatusOK, adminTenantView{Issued: &issuedToken{ID: out.ID, Name: out.Name, Token: out.Token}})
}

// revokeToken revokes one token (DELETE /v1/tenants/{t}/tokens/{id}):
// every request and console session with it ends at once.
func (h *Handler) revokeToken(w http.ResponseWriter, r *http.Request, s Session) {
	t := r.PathValue("t")
	res := h.call(r, s, http.MethodDelete, v1TenantPath(t, "tokens", r.PathValue("id")), nil, nil, nil, 1<<20)
	if res.Status/100 != 2 {
		h.fail(w, r, s, problemOf(res))
		return
	}
	http.Redirect(w, r, "/ui/admin/tenants/"+url.PathEscape(t)+"#tokens-h", http.StatusSeeOther)
}

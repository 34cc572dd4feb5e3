// Package ui is the gateway's web console under /ui/: server-rendered
// pages (html/template, templates and static files embedded) that work
// without JavaScript, a small first-party script for the live parts,
// server-side sessions (sessions.go) and the security headers every
// response carries. Every read and action goes through the REST API v1's
// own handlers (api.Server.ServeAs) as the session's tenant: the console
// has no queries and no authorization of its own.
package ui

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kube5s/sless/services/gateway/internal/api"
	"github.com/kube5s/sless/services/gateway/internal/auth"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// CSP is the Content-Security-Policy of every console response: scripts,
// styles and fetches from the console's own origin only, no inline code.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'"

// Prefix is where the console is mounted.
const Prefix = "/ui/"

// SessionTTL is how long a login lasts.
const SessionTTL = 12 * time.Hour

// API is the REST API v1 as the console uses it (api.Server).
type API interface {
	ServeAs(w http.ResponseWriter, r *http.Request, c api.Caller)
	Identify(ctx context.Context, token string) (api.Caller, string, error)
	AdminTokenID() string
}

// Config is what the console needs to know about the installation.
type Config struct {
	// Secure marks the session cookie Secure and names it __Host-...;
	// set it when the gateway is reached over HTTPS (a TLS request sets
	// it too).
	Secure bool
	// APIURL is the public base URL of the API, for the links and the
	// "copy as curl" of the invoke panel.
	APIURL string
	// TraceQueryURL is the base of the trace store's query API (Jaeger);
	// empty: no waterfall.
	TraceQueryURL string
}

// Handler serves the console.
type Handler struct {
	cfg      Config
	api      API
	sessions *Sessions
	logins   *auth.Failures
	traces   *Traces
	log      *slog.Logger
	pages    map[string]*template.Template
	mux      *http.ServeMux
	handler  http.Handler
}

// Logins a client address may try: a burst, then one every 6 seconds.
const (
	loginsPerSecond = 1.0 / 6
	loginBurst      = 10
)

// New returns the console over the API a and the sessions table of db.
func New(cfg Config, a API, db *pgxpool.Pool, log *slog.Logger) *Handler {
	h := &Handler{cfg: cfg, api: a, log: log, pages: mustParsePages(),
		sessions: &Sessions{db: db, adminID: a.AdminTokenID},
		logins:   auth.NewFailures(loginsPerSecond, loginBurst)}
	if cfg.TraceQueryURL != "" {
		h.traces = &Traces{BaseURL: cfg.TraceQueryURL}
	}
	m := http.NewServeMux()
	static, _ := fs.Sub(staticFiles, "static")
	m.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", staticHandler(static)))
	m.HandleFunc("GET /ui/{$}", h.withSession(h.home))
	m.HandleFunc("GET /ui/login", h.loginPage)
	m.HandleFunc("POST /ui/login", h.login)
	m.HandleFunc("POST /ui/logout", h.logout)
	m.HandleFunc("GET /ui/functions", h.withSession(h.functions))
	m.HandleFunc("GET /ui/functions/{name}", h.withSession(h.function))
	m.HandleFunc("POST /ui/functions/{name}/invoke", h.withSession(h.invoke))
	m.HandleFunc("GET /ui/functions/{name}/builds/{id}/log", h.withSession(h.buildLog))
	m.HandleFunc("GET /ui/functions/{name}/logs", h.withSession(h.functionLogTail))
	m.HandleFunc("POST /ui/functions/{name}/triggers/{trigger}/enabled", h.withSession(h.setTriggerEnabled))
	m.HandleFunc("POST /ui/functions/{name}/jobs/{job}/run", h.withSession(h.runJob))
	m.HandleFunc("GET /ui/invocations", h.withSession(h.invocations))
	m.HandleFunc("GET /ui/dead-letters", h.withSession(h.deadLetters))
	m.HandleFunc("POST /ui/dead-letters/{id}/replay", h.withSession(h.replayDeadLetter))
	m.HandleFunc("POST /ui/dead-letters/replay", h.withSession(h.replaySelected))
	m.HandleFunc("GET /ui/invocations/{id}", h.withSession(h.invocation))
	m.HandleFunc("POST /ui/invocations/{id}/replay", h.withSession(h.replayInvocation))
	h.registerAdmin(m) // admin.go
	m.HandleFunc("/ui/", h.notFound)
	h.mux = m
	// Cross-origin POSTs are refused (Sec-Fetch-Site / Origin), so a form
	// on another site cannot act with the user's cookie; GET changes nothing.
	h.handler = secureHeaders(http.NewCrossOriginProtection().Handler(m))
	return h
}

// notFound is the console's answer for a page that does not exist.
func (h *Handler) notFound(w http.ResponseWriter, r *http.Request) {
	h.render(w, r, http.StatusNotFound, "error", Page{Title: "Not found", Data: errorView{Status: 404, Message: "There is no such page."}})
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.handler.ServeHTTP(w, r) }

// secureHeaders sets the security headers of every console response.
func secureHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", CSP)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Referrer-Policy", "same-origin")
		hd.Set("Cross-Origin-Opener-Policy", "same-origin")
		if !strings.HasPrefix(r.URL.Path, "/ui/static/") {
			hd.Set("Cache-Control", "no-store")
		}
		next.ServeHTTP(w, r)
	})
}

func staticHandler(fsys fs.FS) http.Handler {
	fileServer := http.FileServerFS(fsys)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "" || strings.HasSuffix(r.URL.Path, "/") {
			http.NotFound(w, r) // no listings
			return
		}
		w.Header().Set("Cache-Control", "no-cache")
		fileServer.ServeHTTP(w, r)
	})
}

// The session cookie: __Host- (Secure, Path=/, no Domain) over HTTPS.
func (h *Handler) secure(r *http.Request) bool { return h.cfg.Secure || r.TLS != nil }

func (h *Handler) cookieName(r *http.Request) string {
	if h.secure(r) {
		return "__Host-sless_session"
	}
	return "sless_session"
}

func (h *Handler) sessionID(r *http.Request) string {
	c, err := r.Cookie(h.cookieName(r))
	if err != nil {
		return ""
	}
	return c.Value
}

func (h *Handler) setCookie(w http.ResponseWriter, r *http.Request, id string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: h.cookieName(r), Value: id, Path: "/", MaxAge: maxAge,
		HttpOnly: true, Secure: h.secure(r), SameSite: http.SameSiteStrictMode})
}

type sessionHandler func(w http.ResponseWriter, r *http.Request, s Session)

// withSession serves h for a live session; without one, a page request is
// sent to the login (coming back after it), anything else gets 401.
func (h *Handler) withSession(next sessionHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, err := h.sessions.Get(r.Context(), h.sessionID(r))
		if err != nil {
			if !errors.Is(err, ErrNoSession) {
				h.log.Error("console session", "err", err)
				h.render(w, r, http.StatusServiceUnavailable, "error", Page{Title: "Unavailable", Data: errorView{Status: 503, Message: "Sessions cannot be checked right now; try again shortly."}})
				return
			}
			if r.Method == http.MethodGet && !wantsJSON(r) {
				http.Redirect(w, r, "/ui/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			h.setCookie(w, r, "", -1)
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "not logged in, or the session ended"})
			return
		}
		if s.Tenant == "" && !strings.HasPrefix(r.URL.Path, "/ui/admin/") {
			// An admin session without a tenant has the admin pages only.
			http.Redirect(w, r, "/ui/admin/tenants", http.StatusSeeOther)
			return
		}
		next(w, r, s)
	}
}

func wantsJSON(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "application/json")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// localNext is where a login returns to: a path of the console only.
func localNext(v string) string {
	if !strings.HasPrefix(v, Prefix) || strings.HasPrefix(v, "//") || strings.ContainsAny(v, "\\\r\n") {
		return "/ui/functions"
	}
	return v
}

func (h *Handler) home(w http.ResponseWriter, r *http.Request, s Session) {
	http.Redirect(w, r, "/ui/functions", http.StatusSeeOther)
}

type loginView struct {
	Next, Tenant, Error string
}

func (h *Handler) loginPage(w http.ResponseWriter, r *http.Request) {
	h.render(w, r, http.StatusOK, "login", Page{Title: "Log in", Data: loginView{Next: localNext(r.URL.Query().Get("next"))}})
}

// login opens a session for a tenant token, or for the admin token
// looking at the tenant it names (none: the admin pages only). Every
// attempt counts against the client address.
func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	if err := r.ParseForm(); err != nil {
		h.render(w, r, http.StatusBadRequest, "login", Page{Title: "Log in", Data: loginView{Error: "The form could not be read."}})
		return
	}
	view := loginView{Next: localNext(r.PostForm.Get("next")), Tenant: r.PostForm.Get("tenant")}
	addr := clientAddr(r)
	if h.logins.Exhausted(addr) {
		w.Header().Set("Retry-After", "6")
		view.Error = "Too many logins from this address; wait a few seconds and try again."
		h.render(w, r, http.StatusTooManyRequests, "login", Page{Title: "Log in", Data: view})
		return
	}
	h.logins.Fail(addr) // every attempt, not only failures: the limit is on trying
	caller, tokenID, err := h.api.Identify(r.Context(), strings.TrimSpace(r.PostForm.Get("token")))
	tenant := strings.TrimSpace(view.Tenant)
	switch {
	case errors.Is(err, auth.ErrBadToken):
		view.Error = "That token is unknown or revoked."
	case err != nil:
		view.Error = "Tokens cannot be checked right now; try again shortly."
	case !caller.Admin && tenant != "" && tenant != caller.Tenant:
		view.Error = "This token belongs to another tenant."
	}
	if view.Error != "" {
		h.render(w, r, http.StatusUnauthorized, "login", Page{Title: "Log in", Data: view})
		return
	}
	if !caller.Admin {
		tenant = caller.Tenant
	}
	if caller.Admin && tenant == "" && !strings.HasPrefix(view.Next, "/ui/admin/") {
		view.Next = "/ui/admin/tenants"
	}
	if old := h.sessionID(r); old != "" {
		_ = h.sessions.Delete(r.Context(), old)
	}
	id, _, err := h.sessions.Create(r.Context(), caller, tenant, tokenID, SessionTTL)
	if err != nil {
		h.log.Error("console login", "tenant", tenant, "err", err)
		view.Error = "The session could not be stored; try again shortly."
		h.render(w, r, http.StatusServiceUnavailable, "login", Page{Title: "Log in", Data: view})
		return
	}
	h.setCookie(w, r, id, int(SessionTTL.Seconds()))
	http.Redirect(w, r, view.Next, http.StatusSeeOther)
}

func (h *Handler) logout(w http.ResponseWriter, r *http.Request) {
	if id := h.sessionID(r); id != "" {
		_ = h.sessions.Delete(r.Context(), id)
	}
	h.setCookie(w, r, "", -1)
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}

func clientAddr(r *http.Request) string {
	if i := strings.LastIndexByte(r.RemoteAddr, ':'); i > 0 {
		return strings.Trim(r.RemoteAddr[:i], "[]")
	}
	return r.RemoteAddr
}

// apiResult is an answer of the REST API to the console.
type apiResult struct {
	Status    int
	Header    http.Header
	Body      []byte
	Truncated bool // the body was longer than the console keeps
}

// capture is a ResponseWriter that keeps up to max bytes of the body.
type capture struct {
	header http.Header
	status int
	buf    bytes.Buffer
	max    int
	cut    bool
}

func (c *capture) Header() http.Header { return c.header }
func (c *capture) WriteHeader(s int) {
	if c.status == 0 {
		c.status = s
	}
}
func (c *capture) Write(p []byte) (int, error) {
	c.WriteHeader(http.StatusOK)
	if room := c.max - c.buf.Len(); room < len(p) {
		c.buf.Write(p[:max(room, 0)])
		c.cut = true
		return len(p), nil
	}
	return c.buf.Write(p)
}

// call sends one request to the REST API as the session's caller.
func (h *Handler) call(r *http.Request, s Session, method, path string, q url.Values, body []byte, hdr http.Header, limit int) apiResult {
	u := path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(r.Context(), method, u, bytes.NewReader(body))
	if err != nil {
		return apiResult{Status: http.StatusBadRequest, Body: []byte(`{"detail":"the request could not be formed"}`)}
	}
	if hdr != nil {
		req.Header = hdr.Clone()
	}
	req.ContentLength = int64(len(body))
	req.RemoteAddr, req.Host, req.Proto = r.RemoteAddr, r.Host, r.Proto
	c := &capture{header: http.Header{}, max: limit}
	h.api.ServeAs(c, req, s.Caller())
	if c.status == 0 {
		c.status = http.StatusOK
	}
	return apiResult{Status: c.status, Header: c.header, Body: c.buf.Bytes(), Truncated: c.cut}
}

// apiError is a REST API answer other than 2xx.
type apiError struct {
	Status int
	Detail string
}

func (e *apiError) Error() string { return fmt.Sprintf("%d: %s", e.Status, e.Detail) }

func problemOf(res apiResult) *apiError {
	var p struct {
		Detail string `json:"detail"`
		Errors []struct {
			Message  string `json:"message"`
			Location string `json:"location"`
		} `json:"errors"`
	}
	_ = json.Unmarshal(res.Body, &p)
	d := p.Detail
	for _, e := range p.Errors {
		d += "; " + e.Location + ": " + e.Message
	}
	if d == "" {
		d = http.StatusText(res.Status)
	}
	return &apiError{Status: res.Status, Detail: d}
}

// get reads a JSON document of the REST API into out.
func (h *Handler) get(r *http.Request, s Session, path string, q url.Values, out any) error {
	res := h.call(r, s, http.MethodGet, path, q, nil, http.Header{"Accept": {"application/json"}}, 32<<20)
	if res.Status/100 != 2 {
		return problemOf(res)
	}
	if err := json.Unmarshal(res.Body, out); err != nil {
		return fmt.Errorf("decode %s: %w", path, err)
	}
	return nil
}

func tenantPath(s Session, rest ...string) string { return v1TenantPath(s.Tenant, rest...) }

// v1TenantPath is the API path of tenant's rest, every segment escaped.
func v1TenantPath(tenant string, rest ...string) string {
	p := "/v1/tenants/" + url.PathEscape(tenant)
	for _, r := range rest {
		p += "/" + url.PathEscape(r)
	}
	return p
}

// fail renders the page for an error of the API: its own status and
// detail (a 404 of another tenant's object is a 404 here too).
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, s Session, err error) {
	var ae *apiError
	if errors.As(err, &ae) {
		title := http.StatusText(ae.Status)
		h.render(w, r, ae.Status, "error", Page{Title: title, Session: &s, Data: errorView{Status: ae.Status, Message: ae.Detail}})
		return
	}
	h.log.Error("console page", "path", r.URL.Path, "tenant", s.Tenant, "err", err)
	h.render(w, r, http.StatusInternalServerError, "error", Page{Title: "Error", Session: &s, Data: errorView{Status: 500, Message: "The page could not be made."}})
}

// Page is what every template gets.
type Page struct {
	Title   string
	Session *Session
	Nav     string // the current section: functions, invocations, tenants
	Data    any
}

type errorView struct {
	Status  int
	Message string
}

// render writes page with template name.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, status int, name string, p Page) {
	var buf bytes.Buffer
	if err := renderPage(&buf, h.pages, name, p); err != nil {
		h.log.Error("console render", "page", name, "err", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = io.Copy(w, &buf)
}

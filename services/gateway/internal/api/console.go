package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"strings"

	"github.com/kube5s/sless/services/gateway/internal/auth"
)

// Caller is who the web console acts as: a tenant's token, or the admin
// token looking at one tenant.
type Caller struct {
	Tenant string
	Admin  bool
}

// ServeAs serves r through the REST API v1 as caller: the same routes,
// authorization, rate limits, validation and queries as a request with
// the caller's bearer token. The console calls it with the tenant of its
// session, never one from its own URL; a principal in the context cannot
// come from outside the process.
func (s *Server) ServeAs(w http.ResponseWriter, r *http.Request, c Caller) {
	r.Header.Del("Authorization")
	r.Header.Del("Cookie") // the console's session is not the function's business
	p := principal{tenant: c.Tenant, admin: c.Admin}
	s.router.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), keyPrincipal, p)))
}

// Identify checks a token presented at the console's login: the admin
// token (compared in constant time) or a tenant token. tokenID names what
// the session depends on: the token's id, or AdminTokenID of the current
// admin token, so that revoking the token (or changing the admin token)
// ends the sessions it opened.
func (s *Server) Identify(ctx context.Context, token string) (c Caller, tokenID string, err error) {
	if token != "" && subtle.ConstantTimeCompare([]byte(token), []byte(s.Config.AdminToken)) == 1 {
		return Caller{Admin: true}, s.AdminTokenID(), nil
	}
	if !strings.HasPrefix(token, auth.TokenPrefix) || len(token) > 128 {
		return Caller{}, "", auth.ErrBadToken
	}
	tenant, id, err := s.tokens.Identify(ctx, token)
	if err != nil {
		return Caller{}, "", err
	}
	return Caller{Tenant: tenant}, id, nil
}

// AdminTokenID names the current admin token without revealing it.
func (s *Server) AdminTokenID() string {
	h := sha256.Sum256([]byte("sless-console-admin\x00" + s.Config.AdminToken))
	return "admin-" + hex.EncodeToString(h[:8])
}

// TenantHost tells whether host is a tenant's own host
// (<tenant>.<FunctionsDomain>), which serves that tenant's triggers only.
func (s *Server) TenantHost(host string) (string, bool) { return s.tenantHost(host) }

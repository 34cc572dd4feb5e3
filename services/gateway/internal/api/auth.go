package api

import (
	"context"
	"crypto/subtle"
	"errors"
	"net"
	"net/http"
	"strings"

	"github.com/kube5s/sless/services/gateway/internal/auth"
)

// principal is who is calling.
type principal struct {
	admin   bool
	tenant  string
	bad     string // why the presented token was refused
	none    bool
	guessed bool // too many failed lookups from the caller's address
}

// tokenChecker finds the tenant of a tenant token (auth.Tokens).
type tokenChecker interface {
	Known(tok string) (tenant string, ok bool)
	Lookup(ctx context.Context, tok string) (tenant string, err error)
	Identify(ctx context.Context, tok string) (tenant, id string, err error)
}

// guessCounter counts the failed token lookups of each client address
// (auth.Failures).
type guessCounter interface {
	Exhausted(addr string) bool
	Fail(addr string)
}

// rateLimiter applies the tenants' rate limits (auth.Limiter).
type rateLimiter interface {
	Allow(ctx context.Context, tenant, bucket string) error
}

// authenticate reads the bearer token: the admin token (compared in constant
// time) or a tenant token (looked up by its SHA-256).
func (s *Server) authenticate(r *http.Request) principal {
	h := r.Header.Get("Authorization")
	if h == "" {
		return principal{none: true}
	}
	tok, ok := strings.CutPrefix(h, "Bearer ")
	// ConstantTimeCompare answers at once for tokens of another length;
	// the check before it only spares every tenant call two copies of the
	// tokens.
	if ok && tok != "" && len(tok) == len(s.Config.AdminToken) && subtle.ConstantTimeCompare([]byte(tok), []byte(s.Config.AdminToken)) == 1 {
		return principal{admin: true}
	}
	if tenant, known := s.tokens.Known(tok); known {
		return principal{tenant: tenant}
	}
	addr := clientAddr(r)
	if s.guesses.Exhausted(addr) {
		return principal{guessed: true}
	}
	var bad string
	switch {
	case !ok || tok == "":
		bad = "the Authorization header is not a bearer token"
	case !strings.HasPrefix(tok, auth.TokenPrefix) || len(tok) > 128:
		bad = "the token is not a sless token"
	default:
		tenant, err := s.tokens.Lookup(r.Context(), tok)
		if err == nil {
			return principal{tenant: tenant}
		}
		if !errors.Is(err, auth.ErrBadToken) {
			return principal{bad: err.Error()} // the database, not the caller, failed
		}
		bad = err.Error()
	}
	s.guesses.Fail(addr)
	return principal{bad: bad}
}

// principalOf is the caller of ctx, authenticated once per request.
func (s *Server) principalOf(ctx context.Context) principal {
	c := callOf(ctx)
	if c == nil { // outside the router: no request to authenticate
		return s.authenticate(&http.Request{Header: http.Header{}})
	}
	if !c.authed {
		c.principal, c.authed = s.authenticate(c.r), true
	}
	return c.principal
}

// authenticateFirst authenticates a /v1 request that carries a body before
// anything reads it: a caller without a valid token, or with a token of
// another tenant than the path names, is answered before it may upload
// megabytes. Handlers still authorize as before, from the same principal.
func (s *Server) authenticateFirst(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength == 0 || !strings.HasPrefix(r.URL.Path, "/v1/") {
			next.ServeHTTP(w, r)
			return
		}
		c := callOf(r.Context())
		c.r = r
		p := s.principalOf(r.Context())
		// The tenant the path names ("", "v1", "tenants", t, ...); POST
		// /v1/tenants names none and is the admin's.
		tenant := ""
		if rest, ok := strings.CutPrefix(r.URL.Path, "/v1/tenants/"); ok {
			tenant, _, _ = strings.Cut(rest, "/")
		}
		if err := s.authorize(r.Context(), p, tenant); err != nil {
			s.writeError(w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// clientAddr is the address failed lookups are counted against: the
// connection's peer (behind a proxy, the proxy; see docs/decisions.md).
func clientAddr(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

// authorize allows p to act on tenant ("" = an admin operation).
func (s *Server) authorize(ctx context.Context, p principal, tenant string) error {
	switch {
	case p.none:
		return withID(ctx, problem(401, "", "an Authorization: Bearer token is required"))
	case p.guessed:
		return withID(ctx, problem(429, "", "too many failed token lookups from this address").retry(1))
	case p.bad != "":
		return withID(ctx, problem(401, "", "%s", p.bad))
	case p.admin:
		return nil
	case tenant == "":
		return withID(ctx, problem(403, "", "this operation needs the admin token"))
	case p.tenant != tenant:
		return withID(ctx, problem(403, "", "this token belongs to another tenant"))
	}
	return nil
}

// requireAdmin allows the admin token only.
func (s *Server) requireAdmin(ctx context.Context) error {
	return s.authorize(ctx, s.principalOf(ctx), "")
}

// requireTenant allows the admin token and tokens of that tenant, and
// applies the tenant's rate limit to tenant tokens.
func (s *Server) requireTenant(ctx context.Context, tenant string) error {
	p := s.principalOf(ctx)
	if err := s.authorize(ctx, p, tenant); err != nil || p.admin {
		return err
	}
	return s.limits.Allow(ctx, tenant, tenant)
}

func withID(ctx context.Context, p *Problem) *Problem {
	p.RequestID = RequestID(ctx)
	return p
}

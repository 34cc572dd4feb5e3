package api

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/time/rate"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/jitter"
)

// TokenPrefix starts every tenant token.
const TokenPrefix = "slt_"

// principal is who is calling.
type principal struct {
	admin   bool
	tenant  string
	bad     string // why the presented token was refused
	none    bool
	guessed bool // too many failed lookups from the caller's address
}

// Failed token lookups a client address may make: a burst, then one a
// second. Past that, unknown tokens from the address get 429 without a
// database lookup; tokens already known pass.
const (
	failedLookupsPerSecond = 1
	failedLookupsBurst     = 20
)

// authenticate reads the bearer token: the admin token (compared in constant
// time) or a tenant token (looked up by its SHA-256).
func (s *Server) authenticate(r *http.Request) principal {
	h := r.Header.Get("Authorization")
	if h == "" {
		return principal{none: true}
	}
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if ok && tok != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(s.Config.AdminToken)) == 1 {
		return principal{admin: true}
	}
	if tenant, known := s.tokens.known(tok); known {
		return principal{tenant: tenant}
	}
	addr := clientAddr(r)
	if s.guesses.exhausted(addr) {
		return principal{guessed: true}
	}
	var bad string
	switch {
	case !ok || tok == "":
		bad = "the Authorization header is not a bearer token"
	case !strings.HasPrefix(tok, TokenPrefix) || len(tok) > 128:
		bad = "the token is not a sless token"
	default:
		tenant, err := s.tokens.lookup(r.Context(), tok)
		if err == nil {
			return principal{tenant: tenant}
		}
		if !errors.Is(err, errBadToken) {
			return principal{bad: err.Error()} // the database, not the caller, failed
		}
		bad = err.Error()
	}
	s.guesses.fail(addr)
	return principal{bad: bad}
}

// principalOf is the caller of ctx, authenticated once per request.
func (s *Server) principalOf(ctx context.Context) principal {
	if p, ok := ctx.Value(keyPrincipal).(principal); ok {
		return p
	}
	return s.authenticate(requestOf(ctx))
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
		p := s.authenticate(r)
		ctx := context.WithValue(r.Context(), keyPrincipal, p)
		// The tenant the path names ("", "v1", "tenants", t, ...); POST
		// /v1/tenants names none and is the admin's.
		tenant := ""
		if parts := strings.Split(r.URL.Path, "/"); len(parts) >= 4 && parts[2] == "tenants" {
			tenant = parts[3]
		}
		if err := s.authorize(ctx, p, tenant); err != nil {
			s.fail(w, r, err)
			return
		}
		r = r.WithContext(ctx)
		next.ServeHTTP(w, r.WithContext(context.WithValue(ctx, keyRequest, r)))
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

// failures is a token bucket of failed token lookups per client address.
type failures struct {
	mu    sync.Mutex
	m     map[string]*rate.Limiter
	rate  rate.Limit
	burst int
}

func newFailures(perSecond float64, burst int) *failures {
	return &failures{m: map[string]*rate.Limiter{}, rate: rate.Limit(perSecond), burst: burst}
}

func (f *failures) exhausted(addr string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.m[addr]
	return ok && l.Tokens() < 1
}

func (f *failures) fail(addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.m[addr]
	if !ok {
		if len(f.m) > 100000 { // bounded memory; forgetting only forgives
			f.m = map[string]*rate.Limiter{}
		}
		l = rate.NewLimiter(f.rate, f.burst)
		f.m[addr] = l
	}
	l.Allow()
}

func requestOf(ctx context.Context) *http.Request {
	r, _ := ctx.Value(keyRequest).(*http.Request)
	if r == nil {
		r = &http.Request{Header: http.Header{}}
	}
	return r
}

// authorize allows p to act on tenant ("" = an admin operation).
func (s *Server) authorize(ctx context.Context, p principal, tenant string) error {
	switch {
	case p.none:
		return withID(ctx, problem(401, "", "an Authorization: Bearer token is required"))
	case p.guessed:
		return &rateLimited{Problem: withID(ctx, problem(429, "", "too many failed token lookups from this address")), retryAfter: 1}
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
	return s.limits.allow(ctx, tenant, tenant)
}

func withID(ctx context.Context, p *Problem) *Problem {
	p.RequestID = RequestID(ctx)
	return p
}

// hashToken is what the tokens table stores.
func hashToken(tok string) []byte {
	h := sha256.Sum256([]byte(tok))
	return h[:]
}

// newToken returns a token and its id.
func newToken() (token, id string) {
	raw := make([]byte, 32)
	_, _ = rand.Read(raw)
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(raw), "tok-" + newID(6)
}

// tokenCache remembers token lookups for a short while. A revocation
// through any gateway drops the entries at once on every gateway: the
// revoking statement sends a PostgreSQL notification (channel sless_tokens,
// payload "<tenant>/<token id>", the id empty for all of a tenant's tokens)
// that Listen receives. The TTL bounds staleness while Listen is down.
type tokenCache struct {
	db  *pgxpool.Pool
	ttl time.Duration
	log *slog.Logger
	mu  sync.RWMutex
	m   map[string]tokenEntry
}

// tokenChannel is the PostgreSQL notification channel of revocations.
const tokenChannel = "sless_tokens"

type tokenEntry struct {
	tenant  string
	id      string
	expires time.Time
}

func newTokenCache(db *pgxpool.Pool, ttl time.Duration, log *slog.Logger) *tokenCache {
	return &tokenCache{db: db, ttl: ttl, log: log, m: map[string]tokenEntry{}}
}

// Listen applies revocations made by any gateway until ctx ends. It
// redials with backoff, and empties the cache whenever it (re)starts
// listening, since notifications sent meanwhile are lost.
func (c *tokenCache) Listen(ctx context.Context) error {
	redial := jitter.Backoff(100*time.Millisecond, 5*time.Second)
	for {
		began := time.Now()
		err := c.listen(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(began) > time.Minute {
			redial.Reset() // it was listening; this is a new outage
		}
		wait := redial.NextBackOff()
		c.log.Warn("token revocation listener interrupted", "err", err, "retryIn", wait.String())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

func (c *tokenCache) listen(ctx context.Context) error {
	pc, err := c.db.Acquire(ctx)
	if err != nil {
		return err
	}
	conn := pc.Hijack() // a listening session is not returned to the pool
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+tokenChannel); err != nil {
		return err
	}
	c.clear()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		tenant, id, _ := strings.Cut(n.Payload, "/")
		c.forget(tenant, id)
	}
}

func (c *tokenCache) clear() {
	c.mu.Lock()
	c.m = map[string]tokenEntry{}
	c.mu.Unlock()
}

var errBadToken = errors.New("the token is unknown or revoked")

// known returns the tenant of a token the cache holds as valid.
func (c *tokenCache) known(tok string) (string, bool) {
	if !strings.HasPrefix(tok, TokenPrefix) {
		return "", false
	}
	key := string(hashToken(tok))
	c.mu.RLock()
	e, ok := c.m[key]
	c.mu.RUnlock()
	if !ok || e.tenant == "" || !time.Now().Before(e.expires) {
		return "", false
	}
	return e.tenant, true
}

func (c *tokenCache) lookup(ctx context.Context, tok string) (string, error) {
	key := string(hashToken(tok))
	c.mu.RLock()
	e, ok := c.m[key]
	c.mu.RUnlock()
	if ok && time.Now().Before(e.expires) {
		if e.tenant == "" {
			return "", errBadToken
		}
		return e.tenant, nil
	}
	var tenant, id string
	err := c.db.QueryRow(ctx, `SELECT tenant, id FROM api_tokens WHERE token_hash = $1 AND revoked_at IS NULL`, []byte(key)).Scan(&tenant, &id)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return "", errors.New("tokens cannot be checked right now")
	}
	c.mu.Lock()
	if len(c.m) > 100000 {
		c.m = map[string]tokenEntry{}
	}
	c.m[key] = tokenEntry{tenant: tenant, id: id, expires: time.Now().Add(c.ttl)}
	c.mu.Unlock()
	if tenant == "" {
		return "", errBadToken
	}
	return tenant, nil
}

// forget drops every cached token of a tenant, or one token by id.
func (c *tokenCache) forget(tenant, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.m {
		if e.tenant == tenant && (id == "" || e.id == id) {
			delete(c.m, k)
		}
	}
}

// limiter is a token bucket per tenant and bucket at the Tenant's
// invocationsPerSecond, with bursts of twice that. A tenant's token calls
// draw from the bucket named for the tenant; anonymous calls of its
// `auth: none` triggers from one of their own, so that strangers cannot
// starve the tenant's own use of its API.
type limiter struct {
	cache cache.Cache
	mu    sync.Mutex
	m     map[string]*rate.Limiter
}

func newLimiter(c cache.Cache) *limiter { return &limiter{cache: c, m: map[string]*rate.Limiter{}} }

func (l *limiter) allow(ctx context.Context, tenant, bucket string) error {
	perSec := 100
	if l.cache != nil {
		var t slessv1.Tenant
		if err := l.cache.Get(ctx, client.ObjectKey{Name: tenant}, &t, client.UnsafeDisableDeepCopy); err == nil && t.Spec.Quotas.InvocationsPerSecond > 0 {
			perSec = int(t.Spec.Quotas.InvocationsPerSecond)
		}
	}
	l.mu.Lock()
	lim, ok := l.m[bucket]
	if !ok || lim.Limit() != rate.Limit(perSec) {
		lim = rate.NewLimiter(rate.Limit(perSec), 2*perSec)
		l.m[bucket] = lim
	}
	l.mu.Unlock()
	res := lim.Reserve()
	if d := res.Delay(); d > 0 {
		res.Cancel()
		p := withID(ctx, problem(429, "", "tenant %s is over its rate of %d requests per second", tenant, perSec))
		return &rateLimited{Problem: p, retryAfter: int(math.Ceil(d.Seconds()))}
	}
	return nil
}

// rateLimited is a 429 that also sets Retry-After.
type rateLimited struct {
	*Problem
	retryAfter int
}

// GetHeaders lets huma write Retry-After.
func (e *rateLimited) GetHeaders() http.Header {
	return http.Header{"Retry-After": {strconv.Itoa(max(e.retryAfter, 1))}}
}

// Package auth holds the gateway's token store: the cache of token lookups
// with its revocation listener (PostgreSQL LISTEN), the per-tenant rate
// limiter and the limiter of failed lookups per client address.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/hashicorp/golang-lru/v2/expirable"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kube5s/sless/pkg/jitter"
)

// TokenPrefix starts every tenant token.
const TokenPrefix = "slt_"

// hashToken is what the tokens table stores.
func HashToken(tok string) []byte {
	h := sha256.Sum256([]byte(tok))
	return h[:]
}

// NewToken returns a token and its id.
func NewToken() (token, id string) {
	raw := make([]byte, 38) // 32 for the token, 6 for its id
	_, _ = rand.Read(raw)
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(raw[6:]), "tok-" + hex.EncodeToString(raw[:6])
}

// Tokens remembers token lookups for a short while. A revocation
// through any gateway drops the entries at once on every gateway: the
// revoking statement sends a PostgreSQL notification (channel sless_tokens,
// payload "<tenant>/<token id>", the id empty for all of a tenant's tokens)
// that Listen receives. The TTL bounds staleness while Listen is down.
//
// Both caches are bounded LRUs keyed by the token's hash: valid tokens in
// one, hashes the database does not know in a smaller one of their own, so
// that a flood of distinct bad tokens evicts only bad tokens, never a
// tenant's.
type Tokens struct {
	db      *pgxpool.Pool
	log     *slog.Logger
	valid   *expirable.LRU[string, tokenEntry]
	unknown *expirable.LRU[string, struct{}]
}

// The sizes of the caches: every live token of an installation fits in
// the first; the second only spares the database a client retrying one bad
// token.
const (
	validTokens   = 100_000
	unknownTokens = 10_000
)

// tokenChannel is the PostgreSQL notification channel of revocations.
const tokenChannel = "sless_tokens"

type tokenEntry struct {
	tenant string
	id     string
}

// NewTokens returns an empty cache over the api_tokens table whose entries
// live for ttl.
func NewTokens(db *pgxpool.Pool, ttl time.Duration, log *slog.Logger) *Tokens {
	return &Tokens{db: db, log: log,
		valid:   expirable.NewLRU[string, tokenEntry](validTokens, nil, ttl),
		unknown: expirable.NewLRU[string, struct{}](unknownTokens, nil, ttl)}
}

// Listen applies revocations made by any gateway until ctx ends. It
// redials with backoff, and empties the cache whenever it (re)starts
// listening, since notifications sent meanwhile are lost.
func (c *Tokens) Listen(ctx context.Context) error {
	redial := jitter.NewRedial(100*time.Millisecond, 5*time.Second)
	for {
		began := time.Now()
		err := c.listen(ctx)
		if ctx.Err() != nil {
			return nil
		}
		wait := redial.After(began)
		c.log.Warn("token revocation listener interrupted", "err", err, "retryIn", wait.String())
		if !jitter.Wait(ctx, wait) {
			return nil
		}
	}
}

func (c *Tokens) listen(ctx context.Context) error {
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

func (c *Tokens) clear() { c.valid.Purge() }

// ErrBadToken: the token is not one of a tenant.
var ErrBadToken = errors.New("the token is unknown or revoked")

// Known returns the tenant of a token the cache holds as valid.
func (c *Tokens) Known(tok string) (string, bool) {
	if !strings.HasPrefix(tok, TokenPrefix) {
		return "", false
	}
	e, ok := c.valid.Get(string(HashToken(tok)))
	return e.tenant, ok
}

// Lookup returns the tenant of a token, from the cache or the database.
func (c *Tokens) Lookup(ctx context.Context, tok string) (string, error) {
	tenant, _, err := c.Identify(ctx, tok)
	return tenant, err
}

// Identify returns the tenant and the id of a token, from the cache or
// the database: the console keeps the id in a session, which ends when
// the token is revoked.
func (c *Tokens) Identify(ctx context.Context, tok string) (tenant, id string, err error) {
	key := string(HashToken(tok))
	if e, ok := c.valid.Get(key); ok {
		return e.tenant, e.id, nil
	}
	if c.unknown.Contains(key) {
		return "", "", ErrBadToken
	}
	var e tokenEntry
	err = c.db.QueryRow(ctx, `SELECT tenant, id FROM api_tokens WHERE token_hash = $1 AND revoked_at IS NULL`, []byte(key)).Scan(&e.tenant, &e.id)
	if errors.Is(err, pgx.ErrNoRows) {
		c.unknown.Add(key, struct{}{})
		return "", "", ErrBadToken
	}
	if err != nil {
		return "", "", errors.New("tokens cannot be checked right now")
	}
	c.valid.Add(key, e)
	return e.tenant, e.id, nil
}

// ErrNotFound: no such token, or it is revoked already.
var ErrNotFound = errors.New("token not found")

// Issue stores a new token of tenant and returns it, once.
func (c *Tokens) Issue(ctx context.Context, tenant, name string) (token, id string, created time.Time, err error) {
	token, id = NewToken()
	err = c.db.QueryRow(ctx, `INSERT INTO api_tokens (id, tenant, name, token_hash) VALUES ($1, $2, $3, $4) RETURNING created_at`,
		id, tenant, name, HashToken(token)).Scan(&created)
	if err != nil {
		return "", "", time.Time{}, fmt.Errorf("store token of %s: %w", tenant, err)
	}
	return token, id, created, nil
}

// Revoke revokes one token of tenant, on every gateway: the notification
// goes out with the commit.
func (c *Tokens) Revoke(ctx context.Context, tenant, id string) error {
	var revoked string
	err := c.db.QueryRow(ctx, `WITH r AS (UPDATE api_tokens SET revoked_at = now() WHERE id = $1 AND tenant = $2 AND revoked_at IS NULL RETURNING id)
		SELECT r.id FROM r, LATERAL (SELECT pg_notify('`+tokenChannel+`', $2::text || '/' || r.id)) AS n`, id, tenant).Scan(&revoked)
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("revoke token %s/%s: %w", tenant, id, err)
	}
	c.forget(tenant, id)
	return nil
}

// RevokeAll revokes every token of tenant, on every gateway.
func (c *Tokens) RevokeAll(ctx context.Context, tenant string) error {
	if _, err := c.db.Exec(ctx, `WITH r AS (UPDATE api_tokens SET revoked_at = now() WHERE tenant = $1 AND revoked_at IS NULL)
		SELECT pg_notify('`+tokenChannel+`', $1::text || '/')`, tenant); err != nil {
		return fmt.Errorf("revoke tokens of %s: %w", tenant, err)
	}
	c.forget(tenant, "")
	return nil
}

// forget drops every cached token of a tenant, or one token by id.
func (c *Tokens) forget(tenant, id string) {
	for _, k := range c.valid.Keys() {
		if e, ok := c.valid.Peek(k); ok && e.tenant == tenant && (id == "" || e.id == id) {
			c.valid.Remove(k)
		}
	}
}

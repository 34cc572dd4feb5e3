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
	"sync"
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
//
// Every accepted token's use is noted in memory; RecordUses writes the
// notes to api_tokens.last_used_at in one statement per interval, so
// that no request waits on PostgreSQL for it.
type Tokens struct {
	db      *pgxpool.Pool
	log     *slog.Logger
	valid   *expirable.LRU[string, tokenEntry]
	unknown *expirable.LRU[string, struct{}]

	usedMu sync.Mutex
	used   map[string]time.Time // token id -> its last use since the last flush
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
		unknown: expirable.NewLRU[string, struct{}](unknownTokens, nil, ttl),
		used:    map[string]time.Time{}}
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
	if ok {
		c.noteUse(e.id)
	}
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
		c.noteUse(e.id)
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
	c.noteUse(e.id)
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

// UseFlush is how often a gateway writes the tokens' last use: a token's
// last_used_at is at most this late, and written at most once per
// interval by each gateway.
const UseFlush = time.Minute

// noteUse remembers that token id was accepted now. The notes are bounded
// like the cache of valid tokens: past that, a use waits for the next
// interval's notes.
func (c *Tokens) noteUse(id string) {
	now := time.Now()
	c.usedMu.Lock()
	if _, ok := c.used[id]; ok || len(c.used) < validTokens {
		c.used[id] = now
	}
	c.usedMu.Unlock()
}

// RecordUses writes the uses noted since the last write to
// api_tokens.last_used_at every interval until ctx ends, and once more
// then. A failed write keeps its notes for the next one.
func (c *Tokens) RecordUses(ctx context.Context, every time.Duration) error {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			last, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := c.flushUses(last); err != nil {
				c.log.Warn("token uses not recorded at shutdown", "err", err)
			}
			return nil
		case <-tick.C:
			if err := c.flushUses(ctx); err != nil && ctx.Err() == nil {
				c.log.Warn("token uses not recorded; retrying at the next interval", "err", err)
			}
		}
	}
}

// flushUses writes the noted uses in one statement; a later use already
// written (by another gateway) is kept.
func (c *Tokens) flushUses(ctx context.Context) error {
	c.usedMu.Lock()
	batch := c.used
	c.used = make(map[string]time.Time, len(batch))
	c.usedMu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	ids, times := make([]string, 0, len(batch)), make([]time.Time, 0, len(batch))
	for id, t := range batch {
		ids, times = append(ids, id), append(times, t)
	}
	_, err := c.db.Exec(ctx, `UPDATE api_tokens t SET last_used_at = GREATEST(t.last_used_at, u.at)
		FROM unnest($1::text[], $2::timestamptz[]) AS u(id, at) WHERE t.id = u.id`, ids, times)
	if err == nil {
		return nil
	}
	c.usedMu.Lock()
	for id, t := range batch {
		if later, ok := c.used[id]; !ok || later.Before(t) {
			if ok || len(c.used) < validTokens {
				c.used[id] = t
			}
		}
	}
	c.usedMu.Unlock()
	return fmt.Errorf("record the use of %d tokens: %w", len(batch), err)
}

// Token is what the tokens table says of one token: never the token
// itself nor its hash.
type Token struct {
	ID         string     `json:"id"`
	Tenant     string     `json:"tenant"`
	Name       string     `json:"name"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty" doc:"when a request last presented it, up to a minute late; absent: not used since it was issued"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty" doc:"absent: the token is valid"`
}

// List returns up to limit tokens of tenant, revoked ones included,
// newest first, after the token (afterCreated, afterID) of the previous
// page (a zero afterCreated: from the newest).
func (c *Tokens) List(ctx context.Context, tenant string, afterCreated time.Time, afterID string, limit int64) ([]Token, error) {
	rows, err := c.db.Query(ctx, `SELECT id, tenant, name, created_at, last_used_at, revoked_at FROM api_tokens
		WHERE tenant = $1 AND ($2::timestamptz IS NULL OR (created_at, id) < ($2, $3))
		ORDER BY created_at DESC, id DESC LIMIT $4`, tenant, nullTime(afterCreated), afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("list tokens of %s: %w", tenant, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Token, error) {
		var t Token
		err := r.Scan(&t.ID, &t.Tenant, &t.Name, &t.CreatedAt, &t.LastUsedAt, &t.RevokedAt)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("list tokens of %s: %w", tenant, err)
	}
	return out, nil
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

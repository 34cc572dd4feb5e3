package ui

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kube5s/sless/services/gateway/internal/api"
)

// Session is a logged-in console user: the tenant it acts as, through
// the token it logged in with.
type Session struct {
	Tenant  string
	Admin   bool
	TokenID string
	Expires time.Time
}

// Caller is who the session acts as on the REST API.
func (s Session) Caller() api.Caller { return api.Caller{Tenant: s.Tenant, Admin: s.Admin} }

// ErrNoSession: no such session, or it expired, or its token was revoked.
var ErrNoSession = errors.New("no session")

// Sessions is the table console_sessions (migrations/00009).
type Sessions struct {
	db *pgxpool.Pool
	// adminID names the current admin token (api.Server.AdminTokenID):
	// an admin session lives only as long as the admin token it used.
	adminID func() string
}

func hashID(id string) []byte {
	h := sha256.Sum256([]byte(id))
	return h[:]
}

// Create stores a new session and returns its id, fresh random bytes at
// every login, so that a session id planted before the login is useless.
func (s *Sessions) Create(ctx context.Context, c api.Caller, tenant, tokenID string, ttl time.Duration) (string, Session, error) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", Session{}, fmt.Errorf("session id: %w", err)
	}
	id := base64.RawURLEncoding.EncodeToString(raw)
	sess := Session{Tenant: tenant, Admin: c.Admin, TokenID: tokenID}
	err := s.db.QueryRow(ctx, `INSERT INTO console_sessions (id_hash, tenant, admin, token_id, expires_at)
		VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5)) RETURNING expires_at`,
		hashID(id), tenant, c.Admin, tokenID, ttl.Seconds()).Scan(&sess.Expires)
	if err != nil {
		return "", Session{}, fmt.Errorf("store session of %s: %w", tenant, err)
	}
	// Expired sessions go at logins, not on a timer: bounded by the logins.
	_, _ = s.db.Exec(ctx, `DELETE FROM console_sessions WHERE expires_at < now()`)
	return id, sess, nil
}

// Get returns the live session of id. A tenant session lives while its
// token is not revoked; an admin session while the admin token is the
// one it logged in with. A dead session is deleted.
func (s *Sessions) Get(ctx context.Context, id string) (Session, error) {
	if id == "" || len(id) > 128 {
		return Session{}, ErrNoSession
	}
	var sess Session
	err := s.db.QueryRow(ctx, `SELECT s.tenant, s.admin, s.token_id, s.expires_at FROM console_sessions s
		WHERE s.id_hash = $1 AND s.expires_at > now() AND CASE WHEN s.admin THEN s.token_id = $2
			ELSE EXISTS (SELECT 1 FROM api_tokens t WHERE t.id = s.token_id AND t.tenant = s.tenant AND t.revoked_at IS NULL) END`,
		hashID(id), s.adminID()).Scan(&sess.Tenant, &sess.Admin, &sess.TokenID, &sess.Expires)
	if errors.Is(err, pgx.ErrNoRows) {
		_ = s.Delete(ctx, id)
		return Session{}, ErrNoSession
	}
	if err != nil {
		return Session{}, fmt.Errorf("read session: %w", err)
	}
	return sess, nil
}

// Delete ends the session of id.
func (s *Sessions) Delete(ctx context.Context, id string) error {
	if _, err := s.db.Exec(ctx, `DELETE FROM console_sessions WHERE id_hash = $1`, hashID(id)); err != nil {
		return fmt.Errorf("delete session: %w", err)
	}
	return nil
}

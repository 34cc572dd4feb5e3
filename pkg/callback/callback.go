// Package callback owns how an async invocation's callback proves where it
// comes from: an HMAC-SHA256 signature over a timestamp and the body, keyed
// with a secret per tenant that the tenant reads through the API, in the
// way webhook providers sign their deliveries. The secrets live in
// PostgreSQL (table callback_secrets), so the gateway that shows them and
// the invoker that signs with them agree without sharing a key.
package callback

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Tolerance is how old a signature a receiver should accept; older ones
// may be replays.
const Tolerance = 5 * time.Minute

// Sign returns the headers.Signature value for body sent at t:
// "t=<unix seconds>,v1=<hex HMAC-SHA256>", the MAC being over "<t>.<body>"
// with the tenant's secret (its UTF-8 bytes) as key.
func Sign(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + mac(secret, ts, body)
}

func mac(secret, ts string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts))
	m.Write([]byte("."))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// ErrBadSignature is returned by Verify for any mismatch.
var ErrBadSignature = errors.New("callback signature does not verify")

// Verify checks a headers.Signature value against body, as a receiver does:
// the MAC must match and the timestamp be within Tolerance of now.
func Verify(secret, header string, body []byte, now time.Time) error {
	var ts string
	var sigs []string
	for part := range strings.SplitSeq(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sigs = append(sigs, v)
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return fmt.Errorf("%w: malformed header", ErrBadSignature)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > Tolerance || d < -Tolerance {
		return fmt.Errorf("%w: timestamp %s is outside the tolerance", ErrBadSignature, ts)
	}
	want := mac(secret, ts, body)
	for _, s := range sigs {
		if hmac.Equal([]byte(s), []byte(want)) {
			return nil
		}
	}
	return ErrBadSignature
}

// DB is the part of a pgx pool the secret store uses.
type DB interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Secret returns the tenant's secret, making one the first time.
func Secret(ctx context.Context, db DB, tenant string) (string, error) {
	if _, err := db.Exec(ctx, `INSERT INTO callback_secrets (tenant, secret) VALUES ($1, $2) ON CONFLICT (tenant) DO NOTHING`,
		tenant, newSecret()); err != nil {
		return "", fmt.Errorf("callback secret of %s: %w", tenant, err)
	}
	var s string
	if err := db.QueryRow(ctx, `SELECT secret FROM callback_secrets WHERE tenant = $1`, tenant).Scan(&s); err != nil {
		return "", fmt.Errorf("callback secret of %s: %w", tenant, err)
	}
	return s, nil
}

// Rotate gives the tenant a new secret and returns it; callbacks signed
// from now on use it.
func Rotate(ctx context.Context, db DB, tenant string) (string, error) {
	s := newSecret()
	if _, err := db.Exec(ctx, `INSERT INTO callback_secrets (tenant, secret) VALUES ($1, $2)
		ON CONFLICT (tenant) DO UPDATE SET secret = excluded.secret, created_at = now()`, tenant, s); err != nil {
		return "", fmt.Errorf("rotate callback secret of %s: %w", tenant, err)
	}
	return s, nil
}

// Forget deletes the tenant's secret (with the tenant).
func Forget(ctx context.Context, db DB, tenant string) error {
	if _, err := db.Exec(ctx, `DELETE FROM callback_secrets WHERE tenant = $1`, tenant); err != nil {
		return fmt.Errorf("forget callback secret of %s: %w", tenant, err)
	}
	return nil
}

func newSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return "whsec_" + base64.RawURLEncoding.EncodeToString(b)
}

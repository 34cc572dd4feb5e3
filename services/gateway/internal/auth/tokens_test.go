package auth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/kube5s/sless/migrations"
	"github.com/kube5s/sless/pkg/testenv"
)

// lookups counts the token lookups that reach PostgreSQL.
type lookups struct{ n atomic.Int64 }

func (l *lookups) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "FROM api_tokens WHERE token_hash") {
		l.n.Add(1)
	}
	return ctx
}

func (l *lookups) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestBadTokenFloodKeepsGoodTokensCached: more distinct bad tokens than the
// whole cache holds do not push a tenant's token out of it (it is still
// answered without the database), and a revocation still takes effect.
func TestBadTokenFloodKeepsGoodTokensCached(t *testing.T) {
	ctx := t.Context()
	url := testenv.Postgres(t)
	migrated, err := migrations.Open(ctx, url, true)
	if err != nil {
		t.Fatalf("migrate: %v", err)
	}
	migrated.Close()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	var store lookups
	cfg.ConnConfig.Tracer = &store
	cfg.MaxConns = 8
	db, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)

	c := NewTokens(db, time.Hour, slog.New(slog.NewTextHandler(io.Discard, nil)))
	good, id, _, err := c.Issue(ctx, "acme", "ci")
	if err != nil {
		t.Fatal(err)
	}
	if tenant, err := c.Lookup(ctx, good); err != nil || tenant != "acme" {
		t.Fatalf("Lookup(good) = %q, %v; want acme", tenant, err)
	}

	// More than the old whole-cache limit (100,000 entries), all distinct.
	const flood = 100_001
	const workers = 8
	var g errgroup.Group
	for w := range workers {
		g.Go(func() error {
			for i := w; i < flood; i += workers {
				if _, err := c.Lookup(ctx, fmt.Sprintf("%sbad-%d", TokenPrefix, i)); !errors.Is(err, ErrBadToken) {
					return fmt.Errorf("bad token %d: %v, want ErrBadToken", i, err)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}

	before := store.n.Load()
	if tenant, known := c.Known(good); !known || tenant != "acme" {
		t.Errorf("after %d bad tokens, Known(good) = %q, %v; want acme from the cache", flood, tenant, known)
	}
	if tenant, err := c.Lookup(ctx, good); err != nil || tenant != "acme" {
		t.Fatalf("after the flood, Lookup(good) = %q, %v; want acme", tenant, err)
	}
	if n := store.n.Load() - before; n != 0 {
		t.Errorf("after %d bad tokens, the good token took %d database lookups, want 0 (served from the cache)", flood, n)
	}

	// A bad token asked again is answered from its own cache. (One asked
	// after the flood: which of the flood's tokens are still among the
	// newest depends on how the workers were scheduled.)
	last := fmt.Sprintf("%sbad-after-the-flood", TokenPrefix)
	if _, err := c.Lookup(ctx, last); !errors.Is(err, ErrBadToken) {
		t.Errorf("Lookup(bad) = %v, want ErrBadToken", err)
	}
	before = store.n.Load()
	if _, err := c.Lookup(ctx, last); !errors.Is(err, ErrBadToken) {
		t.Errorf("Lookup(bad again) = %v, want ErrBadToken", err)
	}
	if n := store.n.Load() - before; n != 0 {
		t.Errorf("a bad token asked again took %d database lookups, want 0", n)
	}

	// Revocation drops the cached entry at once.
	if err := c.Revoke(ctx, "acme", id); err != nil {
		t.Fatal(err)
	}
	if tenant, known := c.Known(good); known {
		t.Errorf("after the revocation, Known(good) = %q, true; want unknown", tenant)
	}
	if tenant, err := c.Lookup(ctx, good); !errors.Is(err, ErrBadToken) {
		t.Errorf("after the revocation, Lookup(good) = %q, %v; want ErrBadToken", tenant, err)
	}
}

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

// writes counts the statements that write a token's last use.
type writes struct{ n atomic.Int64 }

func (w *writes) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "SET last_used_at") {
		w.n.Add(1)
	}
	return ctx
}

func (w *writes) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestTokenUseIsRecordedOffTheRequestPath: accepting a token (from the
// cache or the database) writes nothing; the uses noted meanwhile are
// written in one statement, after which the token's last_used_at is set
// and an unused token's is not; RecordUses does the same on its own
// every interval.
func TestTokenUseIsRecordedOffTheRequestPath(t *testing.T) {
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
	var w writes
	cfg.ConnConfig.Tracer = &w
	db, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	c := NewTokens(db, time.Hour, slog.New(slog.NewTextHandler(io.Discard, nil)))
	used, usedID, _, err := c.Issue(ctx, "acme", "ci")
	if err != nil {
		t.Fatal(err)
	}
	_, idleID, _, err := c.Issue(ctx, "acme", "idle")
	if err != nil {
		t.Fatal(err)
	}
	lastUsed := func(id string) *time.Time {
		t.Helper()
		var at *time.Time
		if err := db.QueryRow(ctx, `SELECT last_used_at FROM api_tokens WHERE id = $1`, id).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}

	if _, _, err := c.Identify(ctx, used); err != nil { // from the database
		t.Fatal(err)
	}
	for range 1000 {
		if _, ok := c.Known(used); !ok { // from the cache
			t.Fatal("the token is not cached")
		}
	}
	if n := w.n.Load(); n != 0 {
		t.Fatalf("accepting the token wrote its use %d times, want 0 (only the flush writes)", n)
	}
	if at := lastUsed(usedID); at != nil {
		t.Fatalf("before the flush last_used_at is %v, want NULL", at)
	}
	if err := c.flushUses(ctx); err != nil {
		t.Fatal(err)
	}
	if n := w.n.Load(); n != 1 {
		t.Errorf("1001 uses were written in %d statements, want 1", n)
	}
	first := lastUsed(usedID)
	if first == nil {
		t.Fatal("after the flush the used token's last_used_at is NULL")
	}
	if at := lastUsed(idleID); at != nil {
		t.Errorf("the unused token's last_used_at is %v, want NULL", at)
	}
	if err := c.flushUses(ctx); err != nil || w.n.Load() != 1 {
		t.Errorf("a flush without new uses wrote (%d statements, %v), want nothing", w.n.Load(), err)
	}

	// The loop on its own, with a short interval.
	loop, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.RecordUses(loop, 10*time.Millisecond) }()
	if _, ok := c.Known(used); !ok {
		t.Fatal("the token is not cached")
	}
	testenv.Eventually(t, 10*time.Second, "a later last_used_at", func() (bool, string) {
		at := lastUsed(usedID)
		return at != nil && at.After(*first), fmt.Sprintf("last_used_at %v (first %v)", at, first)
	})
	stop()
	if err := <-done; err != nil {
		t.Errorf("RecordUses: %v", err)
	}
}

// TestListShowsTokensWithoutSecrets: a tenant's tokens, newest first,
// revoked ones with their revocation, paged by (created, id); another
// tenant's are not listed.
func TestListShowsTokensWithoutSecrets(t *testing.T) {
	ctx := t.Context()
	url := testenv.Postgres(t)
	db, err := migrations.Open(ctx, url, true)
	if err != nil {
		t.Fatalf("migrate: %v", err)
	}
	t.Cleanup(db.Close)
	c := NewTokens(db, time.Hour, slog.New(slog.NewTextHandler(io.Discard, nil)))
	var ids []string
	for _, name := range []string{"a", "b", "c"} {
		_, id, _, err := c.Issue(ctx, "acme", name)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if _, _, _, err := c.Issue(ctx, "other", "x"); err != nil {
		t.Fatal(err)
	}
	if err := c.Revoke(ctx, "acme", ids[1]); err != nil {
		t.Fatal(err)
	}
	var got []Token
	var after Token
	for range 4 {
		page, err := c.List(ctx, "acme", after.CreatedAt, after.ID, 2)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, page...)
		if len(page) < 2 {
			break
		}
		after = page[len(page)-1]
	}
	if len(got) != 3 {
		t.Fatalf("listed %d tokens of acme, want 3: %+v", len(got), got)
	}
	for i, tok := range got {
		want := ids[len(ids)-1-i]
		if tok.ID != want || tok.Tenant != "acme" || tok.LastUsedAt != nil {
			t.Errorf("token %d: %+v, want id %s of acme, never used", i, tok, want)
		}
		if revoked := tok.RevokedAt != nil; revoked != (tok.ID == ids[1]) {
			t.Errorf("token %s (%s): revoked %v", tok.ID, tok.Name, revoked)
		}
	}
}

package store

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kube5s/sless/migrations"
	"github.com/kube5s/sless/pkg/testenv"
)

// TestFailuresOfAQuietTenantReadOnlyTheFailures: a tenant whose history
// is thousands of successes and three failures asks for its failures.
// The page must read the failures, not walk the tenant's history and drop
// the successes (at 10 million rows that walk cost 89.6 ms p50,
// docs/scale.md), whether PostgreSQL plans for the values (custom plan)
// or once for any values (generic plan: pgx prepares the statement and
// reuses it). The measure is the rows the plan's scans read, which does
// not depend on the machine's speed.
func TestFailuresOfAQuietTenantReadOnlyTheFailures(t *testing.T) {
	ctx := t.Context()
	db, err := migrations.Open(ctx, testenv.Postgres(t), true)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const successes = 4000
	now := time.Now().UTC().Truncate(time.Second)
	// The quiet tenant: successes, newest last, and three failures among
	// its oldest rows; a busy neighbour with failures of its own.
	for _, ins := range []string{
		`INSERT INTO invocations (id, tenant, function, trigger_kind, status, started_at, finished_at)
		 SELECT 'ok-' || i, 'quiet', 'f' || (i % 10), 'http', 'succeeded', $1::timestamptz - i * interval '1 second', $1::timestamptz
		 FROM generate_series(1, ` + fmt.Sprint(successes) + `) i`,
		`INSERT INTO invocations (id, tenant, function, trigger_kind, status, started_at, finished_at)
		 SELECT 'bad-' || i, 'quiet', 'f1', 'http', 'failed', $1::timestamptz - (` + fmt.Sprint(successes) + ` + i) * interval '1 second', $1::timestamptz
		 FROM generate_series(1, 3) i`,
		`INSERT INTO invocations (id, tenant, function, trigger_kind, status, started_at, finished_at)
		 SELECT 'n-' || i, 'busy', 'f1', 'http', CASE WHEN i % 2 = 0 THEN 'failed' ELSE 'succeeded' END, $1::timestamptz - i * interval '1 second', $1::timestamptz
		 FROM generate_series(1, 4000) i`,
	} {
		if _, err := db.Exec(ctx, ins, now); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(ctx, "ANALYZE invocations"); err != nil {
		t.Fatal(err)
	}

	s := New(db)
	page, err := s.Invocations(ctx, "quiet", InvocationFilter{Status: "failed"}, nil, 2)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"bad-1", "bad-2"}, ids(page)); diff != "" {
		t.Fatalf("first page of failures (-want +got):\n%s", diff)
	}
	after := &After{Time: page[1].StartedAt, ID: page[1].ID}
	rest, err := s.Invocations(ctx, "quiet", InvocationFilter{Status: "failed"}, after, 2)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"bad-3"}, ids(rest)); diff != "" {
		t.Fatalf("cursor page of failures (-want +got):\n%s", diff)
	}

	for _, c := range []struct {
		name  string
		f     InvocationFilter
		after *After
	}{
		{"first page", InvocationFilter{Status: "failed"}, nil},
		{"cursor page", InvocationFilter{Status: "failed"}, after},
		{"by function", InvocationFilter{Status: "failed", Function: "f1"}, nil},
	} {
		q, args := invocationsQuery("quiet", c.f, c.after, 50)
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			read := rowsRead(t, db, mode, q, args)
			// Three failures to find; a walk over the successes reads thousands.
			if read > 10 {
				t.Errorf("%s, %s: the plan's scans read %d rows for at most 3 failures", c.name, mode, read)
			}
		}
	}
}

func ids(page []Invocation) []string {
	out := make([]string, len(page))
	for i, v := range page {
		out[i] = v.ID
	}
	return out
}

// rowsRead runs q as a prepared statement under plan_cache_mode mode,
// with EXPLAIN ANALYZE, and sums the rows its scans read: the rows they
// returned and the rows their filters removed.
func rowsRead(t *testing.T, db *pgxpool.Pool, mode, q string, args []any) int {
	t.Helper()
	ctx := t.Context()
	conn, err := db.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	lits := make([]string, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case string:
			lits[i] = "'" + strings.ReplaceAll(v, "'", "''") + "'"
		case time.Time:
			lits[i] = "'" + v.Format(time.RFC3339Nano) + "'::timestamptz"
		default:
			lits[i] = fmt.Sprint(v)
		}
	}
	for _, st := range []string{"SET plan_cache_mode = " + mode, "PREPARE inv AS " + q} {
		if _, err := conn.Exec(ctx, st); err != nil {
			t.Fatalf("%s: %v", st, err)
		}
	}
	var out []byte
	if err := conn.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE inv("+strings.Join(lits, ", ")+")").Scan(&out); err != nil {
		t.Fatal(err)
	}
	for _, st := range []string{"DEALLOCATE inv", "RESET plan_cache_mode"} {
		if _, err := conn.Exec(ctx, st); err != nil {
			t.Fatalf("%s: %v", st, err)
		}
	}
	var plans []struct{ Plan node }
	if err := json.Unmarshal(out, &plans); err != nil || len(plans) != 1 {
		t.Fatalf("EXPLAIN output %s: %v", out, err)
	}
	n := plans[0].Plan.read()
	if n > 10 {
		t.Logf("%s: %d rows read by the plan\n%s", mode, n, out)
	}
	return n
}

type node struct {
	Type    string  `json:"Node Type"`
	Rows    float64 `json:"Actual Rows"`
	Loops   float64 `json:"Actual Loops"`
	Removed float64 `json:"Rows Removed by Filter"`
	Recheck float64 `json:"Rows Removed by Index Recheck"`
	Plans   []node  `json:"Plans"`
}

func (n node) read() int {
	total := 0
	if strings.HasSuffix(n.Type, "Scan") {
		total += int((n.Rows + n.Removed + n.Recheck) * n.Loops)
	}
	for _, c := range n.Plans {
		total += c.read()
	}
	return total
}

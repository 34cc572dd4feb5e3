package build

import (
	"testing"
	"time"

	"github.com/kube5s/sless/migrations"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/testenv"
)

// TestFailureMessageWithBadBytesIsStored: a build whose output (quoted in
// its failure message) holds a NUL byte and invalid UTF-8 is recorded as
// failed, with those bytes replaced, instead of the update failing.
func TestFailureMessageWithBadBytesIsStored(t *testing.T) {
	db, err := migrations.Open(t.Context(), testenv.Postgres(t), true)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s := &Store{DB: db}
	r := &msg.BuildRequested{BuildID: "b-1", Tenant: "acme", Function: "fx", SourceSHA256: "00", Runtime: "nodejs20", RequestedAt: time.Now()}
	if res, _, err := s.Claim(t.Context(), r, "local", "logs/b-1", "me", time.Minute); err != nil || res != Claimed {
		t.Fatalf("claim: %v %v", res, err)
	}
	if err := s.Finish(t.Context(), "b-1", "me", &msg.BuildCompleted{Result: msg.BuildFailed, Reason: "BuildFailed",
		Message: "SyntaxError: bad\x00byte \xff in index.js"}); err != nil {
		t.Fatalf("finish: %v", err)
	}
	rec, err := s.Get(t.Context(), "b-1")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Message != "SyntaxError: bad\uFFFDbyte \uFFFD in index.js" {
		t.Errorf("message %q", rec.Message)
	}
}

package enqueue

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/pkg/rabbit"
	"github.com/kube5s/sless/services/gateway/internal/store"
)

type publisher struct {
	err  error
	sent []*msg.InvocationRequested
}

func (p *publisher) PublishMessage(_ context.Context, m msg.Message) error {
	if p.err != nil {
		return p.err
	}
	p.sent = append(p.sent, m.(*msg.InvocationRequested))
	return nil
}

// keys is store.Store's idempotency keys in memory, without expiry.
type keys struct {
	err      error
	claimed  map[string]string // key -> invocation
	hashes   map[string][]byte
	released []string
}

func (k *keys) ClaimKey(_ context.Context, tenant, key, function, id string, hash []byte) (string, error) {
	if k.err != nil {
		return "", k.err
	}
	if old, ok := k.claimed[tenant+"/"+key]; ok {
		if !bytes.Equal(k.hashes[tenant+"/"+key], hash) {
			return "", store.ErrKeyReused
		}
		return old, nil
	}
	k.claimed[tenant+"/"+key], k.hashes[tenant+"/"+key] = id, hash
	return id, nil
}

func (k *keys) ReleaseKey(_ context.Context, tenant, key, id string) {
	if k.claimed[tenant+"/"+key] == id {
		delete(k.claimed, tenant+"/"+key)
		k.released = append(k.released, key)
	}
}

type counter struct{ n int }

func (c *counter) AsyncAccepted() { c.n++ }

func call(body string) *msg.InvocationRequested {
	return &msg.InvocationRequested{InvocationID: msg.NewInvocationID(), Tenant: "acme", Function: "hello",
		Request: msg.Request{Query: "a=1", Body: []byte(body)}}
}

func TestAcceptQueuesOncePerKey(t *testing.T) {
	k := &keys{claimed: map[string]string{}, hashes: map[string][]byte{}}
	pub, n := &publisher{}, &counter{}
	a := NewAcceptor(k, pub, n)

	first, err := a.Accept(t.Context(), call("x"), "k1")
	if err != nil || first.Existing {
		t.Fatalf("first call: %+v, %v", first, err)
	}
	again, err := a.Accept(t.Context(), call("x"), "k1")
	if diff := cmp.Diff(Accepted{InvocationID: first.InvocationID, Existing: true}, again); err != nil || diff != "" {
		t.Errorf("the same request under the same key (-want +got):\n%s (err %v)", diff, err)
	}
	if _, err := a.Accept(t.Context(), call("y"), "k1"); !errors.Is(err, store.ErrKeyReused) {
		t.Errorf("another request under the key: %v, want store.ErrKeyReused", err)
	}
	if _, err := a.Accept(t.Context(), call("x"), ""); err != nil {
		t.Errorf("without a key: %v", err)
	}
	if len(pub.sent) != 2 || n.n != 2 {
		t.Errorf("published %d, counted %d; want 2 and 2", len(pub.sent), n.n)
	}
}

func TestAcceptReleasesTheKeyOfAnUnqueuedCall(t *testing.T) {
	k := &keys{claimed: map[string]string{}, hashes: map[string][]byte{}}
	pub, n := &publisher{err: rabbit.ErrRejected}, &counter{}
	a := NewAcceptor(k, pub, n)
	_, err := a.Accept(t.Context(), call("x"), "k1")
	if !errors.Is(err, ErrNotQueued) || !errors.Is(err, rabbit.ErrRejected) {
		t.Fatalf("a refused publish: %v, want ErrNotQueued wrapping rabbit.ErrRejected", err)
	}
	if diff := cmp.Diff([]string{"k1"}, k.released); diff != "" || n.n != 0 {
		t.Errorf("released keys (-want +got):\n%s; counted %d", diff, n.n)
	}
	pub.err = nil
	if got, err := a.Accept(t.Context(), call("x"), "k1"); err != nil || got.Existing {
		t.Errorf("the retry: %+v, %v; want a new invocation", got, err)
	}
	k.err = &store.Unavailable{Detail: "down", Err: io.EOF}
	var u *store.Unavailable
	if _, err := a.Accept(t.Context(), call("x"), "k2"); !errors.As(err, &u) || errors.Is(err, ErrNotQueued) {
		t.Errorf("a failed claim: %v, want the store's error", err)
	}
}

// letters is store.Store's dead letters in memory.
type letters struct {
	reqs     map[string]store.Request
	order    []string
	unmarked []string
}

func (l *letters) NotReplayed(_ context.Context, tenant string, _ store.DeadLetterFilter, limit int64) ([]string, error) {
	var ids []string
	for _, id := range l.order {
		if l.reqs[id].ReplayedAs == "" && int64(len(ids)) < limit {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

func (l *letters) DeadLetterRequest(_ context.Context, tenant, id string) (store.Request, error) {
	r, ok := l.reqs[id]
	if !ok {
		return r, store.ErrNotFound
	}
	return r, nil
}

func (l *letters) MarkReplayed(_ context.Context, tenant, id, newID string) (bool, error) {
	r := l.reqs[id]
	if r.ReplayedAs != "" {
		return false, nil
	}
	r.ReplayedAs = newID
	l.reqs[id] = r
	return true, nil
}

func (l *letters) UnmarkReplayed(_ context.Context, tenant, id, newID string) {
	r := l.reqs[id]
	if r.ReplayedAs == newID {
		r.ReplayedAs = ""
		l.reqs[id] = r
		l.unmarked = append(l.unmarked, id)
	}
}

type payloads map[string][]byte

func (p payloads) Get(_ context.Context, key string) (io.ReadCloser, int64, error) {
	b, ok := p[key]
	if !ok {
		return nil, 0, objstore.ErrNotFound
	}
	return io.NopCloser(bytes.NewReader(b)), int64(len(b)), nil
}

func request(t *testing.T, tenant string) []byte {
	t.Helper()
	b, err := json.Marshal(&msg.InvocationRequested{InvocationID: "old", Tenant: tenant, Function: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestReplayRunsALetterOnce(t *testing.T) {
	big := objstore.PayloadKey("acme", "dl-big")
	l := &letters{reqs: map[string]store.Request{
		"dl-1":      {Raw: request(t, "acme")},
		"dl-big":    {Key: big},
		"dl-done":   {Raw: request(t, "acme"), ReplayedAs: "inv-7"},
		"dl-other":  {Raw: request(t, "other")},
		"dl-escape": {Key: objstore.PayloadKey("other", "x")},
		"dl-gone":   {Key: objstore.PayloadKey("acme", "gone")},
	}}
	pub := &publisher{}
	p := NewReplayer(l, payloads{big: request(t, "acme")}, pub)

	for _, id := range []string{"dl-1", "dl-big"} {
		r, err := p.Replay(t.Context(), "acme", id)
		if err != nil || r.Letter != id || r.InvocationID == "" || r.InvocationID == "old" {
			t.Errorf("replay %s: %+v, %v", id, r, err)
		}
	}
	if len(pub.sent) != 2 || pub.sent[0].InvocationID == "old" || pub.sent[0].EnqueuedAt.IsZero() {
		t.Errorf("published %+v", pub.sent)
	}
	for _, tc := range []struct {
		id   string
		want string
	}{
		{"dl-1", "dead letter dl-1 was replayed as invocation " + l.reqs["dl-1"].ReplayedAs},
		{"dl-done", "dead letter dl-done was replayed as invocation inv-7"},
		{"dl-none", "dead letter dl-none not found"},
		{"dl-other", "dead letter dl-other holds no request of tenant acme"},
		{"dl-escape", "dead letter dl-escape names a request outside its tenant"},
	} {
		if _, err := p.Replay(t.Context(), "acme", tc.id); err == nil || err.Error() != tc.want {
			t.Errorf("replay %s: %v, want %q", tc.id, err, tc.want)
		}
	}
	if _, err := p.Replay(t.Context(), "acme", "dl-none"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("an unknown letter: %v, want store.ErrNotFound", err)
	}
	if _, err := p.Replay(t.Context(), "acme", "dl-gone"); !errors.Is(err, ErrPayloadUnavailable) {
		t.Errorf("a request the object store does not give: %v, want ErrPayloadUnavailable", err)
	}
}

func TestReplayUnmarksALetterNotQueued(t *testing.T) {
	l := &letters{reqs: map[string]store.Request{"dl-1": {Raw: request(t, "acme")}}}
	p := NewReplayer(l, payloads{}, &publisher{err: rabbit.ErrRejected})
	if _, err := p.Replay(t.Context(), "acme", "dl-1"); !errors.Is(err, ErrNotQueued) {
		t.Fatalf("a refused publish: %v, want ErrNotQueued", err)
	}
	if diff := cmp.Diff([]string{"dl-1"}, l.unmarked); diff != "" || l.reqs["dl-1"].ReplayedAs != "" {
		t.Errorf("unmarked (-want +got):\n%s; replayed as %q", diff, l.reqs["dl-1"].ReplayedAs)
	}
}

func TestReplayMatchingSkipsLettersReplayedMeanwhile(t *testing.T) {
	l := &letters{reqs: map[string]store.Request{
		"dl-1": {Raw: request(t, "acme")}, "dl-2": {Raw: request(t, "acme")}, "dl-3": {Raw: request(t, "acme")},
	}, order: []string{"dl-1", "dl-2", "dl-3"}}
	p := NewReplayer(&racingLetters{letters: l, race: "dl-2"}, payloads{}, &publisher{})
	got, err := p.ReplayMatching(t.Context(), "acme", store.DeadLetterFilter{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range got {
		ids = append(ids, r.Letter)
	}
	if diff := cmp.Diff([]string{"dl-1", "dl-3"}, ids); diff != "" {
		t.Errorf("replayed (-want +got):\n%s", diff)
	}
}

// racingLetters has another request replay the letter race between its
// listing and its replay.
type racingLetters struct {
	*letters
	race string
}

func (r *racingLetters) NotReplayed(ctx context.Context, tenant string, f store.DeadLetterFilter, limit int64) ([]string, error) {
	ids, err := r.letters.NotReplayed(ctx, tenant, f, limit)
	_, _ = r.letters.MarkReplayed(ctx, tenant, r.race, "elsewhere")
	return ids, err
}

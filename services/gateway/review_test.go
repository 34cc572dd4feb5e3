package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/objstore"
)

// llmStub is an OpenAI-compatible chat-completions server (POST
// /v1/chat/completions, bearer auth) whose answer depends on the code it
// is shown: "xmrig" is denied, "hang-the-reviewer" never answered (the
// gateway's timeout ends the call), "garble-the-reviewer" answered with
// prose instead of a verdict, anything else allowed. It keeps every
// request body.
type llmStub struct {
	srv    *httptest.Server
	key    string
	mu     sync.Mutex
	bodies []string
}

func newLLMStub(t *testing.T, key string) *llmStub {
	s := &llmStub{key: key}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer "+key {
			http.Error(w, `{"error":{"message":"not found","type":"invalid_request_error"}}`, http.StatusNotFound)
			return
		}
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.bodies = append(s.bodies, string(b))
		s.mu.Unlock()
		content := `{"verdict":"allow","reasons":[]}`
		switch body := string(b); {
		case strings.Contains(body, "hang-the-reviewer"):
			<-r.Context().Done()
			return
		case strings.Contains(body, "garble-the-reviewer"):
			content = "Looks fine to me!"
		case strings.Contains(body, "xmrig"):
			content = `{"verdict":"deny","reasons":["starts the xmrig cryptocurrency miner"]}`
		case strings.Contains(body, "subprocess"):
			content = `{"verdict":"warn","reasons":["runs shell commands"]}`
		}
		answer, _ := json.Marshal(map[string]any{
			"id": "chatcmpl-test", "object": "chat.completion", "created": time.Now().Unix(), "model": "review-model",
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop", "logprobs": nil,
				"message": map[string]any{"role": "assistant", "content": content, "refusal": nil}}},
			"usage": map[string]any{"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
		})
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *llmStub) calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.bodies)
}

func (s *llmStub) env(extra map[string]string) map[string]string {
	env := map[string]string{"SLESS_REVIEW_MODE": "llm", "SLESS_REVIEW_LLM_URL": s.srv.URL + "/v1", "SLESS_REVIEW_LLM_MODEL": "review-model",
		"SLESS_REVIEW_LLM_API_KEY": s.key, "SLESS_REVIEW_TIMEOUT": "500ms"}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

// reviewedUpload creates function fn of tenant and uploads code as its main.py.
func reviewedUpload(t *testing.T, g *gw, ten, tok, fn, code string) (resp, string) {
	t.Helper()
	base := "/v1/tenants/" + ten + "/functions"
	if r := g.call(t, "GET", base+"/"+fn, tok, nil); r.status == 404 {
		expect(t, g.call(t, "POST", base, tok, map[string]any{"name": fn, "runtime": "python3.11", "entrypoint": "main.handler"}), 201, "create")
	}
	archive := zipOf(t, map[string]string{"main.py": code})
	sum := sha256.Sum256(archive)
	return g.call(t, "PUT", base+"/"+fn+"/source", tok, archive, "Content-Type", "application/zip"), hex.EncodeToString(sum[:])
}

// untouched checks that a refused upload stored nothing and changed nothing.
func untouched(t *testing.T, g *gw, ten, fn, sha string) {
	t.Helper()
	if ok, _ := g.store.Exists(t.Context(), objstore.SourceKey(ten, fn, sha)); ok {
		t.Error("a refused upload was stored")
	}
	var f slessv1.Function
	if err := g.kube.Get(t.Context(), client.ObjectKey{Namespace: slessv1.NamespaceFor(ten), Name: fn}, &f); err != nil {
		t.Fatal(err)
	}
	if f.Spec.Source != nil && f.Spec.Source.SHA256 == sha {
		t.Error("a refused upload became the function's source")
	}
}

func storedVerdict(t *testing.T, g *gw, ten, sha string) string {
	t.Helper()
	var v string
	if err := g.db.QueryRow(t.Context(), `SELECT verdict FROM source_reviews WHERE tenant = $1 AND source_sha256 = $2`, ten, sha).Scan(&v); err != nil {
		return "none: " + err.Error()
	}
	return v
}

func TestSourceReviewDenyAnswers422AndIsNotAskedTwice(t *testing.T) {
	g := gateway(t)
	llm := newLLMStub(t, "sk-review-test-key-0123456789")
	rg := g.replica(t, llm.env(nil))
	other, otherTok := g.tenant(t, nil)
	expect(t, g.call(t, "POST", "/v1/tenants/"+other+"/functions", otherTok, fnBody), 201, "other tenant's function")
	ten, tok := rg.tenant(t, nil)

	evil := "import subprocess\n# xmrig --url pool.example:3333\ndef handler(e, c):\n    return 1\n"
	r, sha := reviewedUpload(t, rg, ten, tok, "miner", evil)
	expect(t, r, 422, "denied upload")
	p := r.json(t)
	if p["type"] != "https://sless.kube5s.ru/problems/review-denied" || p["detail"] != "the source review (llm:review-model) denied this source" {
		t.Errorf("deny problem %s", r.body)
	}
	if errs, _ := p["errors"].([]any); len(errs) != 1 || errs[0].(map[string]any)["message"] != "starts the xmrig cryptocurrency miner" {
		t.Errorf("deny problem's errors %v", p["errors"])
	}
	untouched(t, rg, ten, "miner", sha)
	if v := storedVerdict(t, g, ten, sha); v != "deny" {
		t.Errorf("stored verdict %s", v)
	}

	// The same bytes again, from another function of the tenant: the stored
	// verdict answers, the model is not asked again.
	r, _ = reviewedUpload(t, rg, ten, tok, "miner2", evil)
	expect(t, r, 422, "the same denied source again")
	if n := llm.calls(); n != 1 {
		t.Errorf("the model was asked %d times for one digest", n)
	}

	// Allowed code is stored and built as before, with its verdict shown in
	// the upload and in the builds of that source.
	good := "def handler(e, c):\n    return 'hi'\n"
	r, sha = reviewedUpload(t, rg, ten, tok, "hello", good)
	expect(t, r, 200, "allowed upload")
	var out struct {
		Changed bool
		Review  struct {
			Verdict, Reviewer string
			Reasons           []string
		}
	}
	_ = json.Unmarshal(r.body, &out)
	if !out.Changed || out.Review.Verdict != "allow" || out.Review.Reviewer != "llm:review-model" {
		t.Errorf("allowed upload answered %s", r.body)
	}
	r, _ = reviewedUpload(t, rg, ten, tok, "hello", good)
	expect(t, r, 200, "the same allowed source again")
	if n := llm.calls(); n != 2 {
		t.Errorf("the model was asked %d times for two digests", n)
	}
	if _, err := g.db.Exec(t.Context(), `INSERT INTO builds (id, tenant, function, source_sha256, runtime, driver, state, requested_at)
		VALUES ($1, $2, 'hello', $3, 'python3.11', 'local', 'queued', now())`, "b-"+ten, ten, sha); err != nil {
		t.Fatal(err)
	}
	r = rg.call(t, "GET", "/v1/tenants/"+ten+"/functions/hello/builds", tok, nil)
	expect(t, r, 200, "builds")
	var builds struct {
		Items []struct {
			ID     string
			Review *struct{ Verdict, Reviewer string }
		}
	}
	_ = json.Unmarshal(r.body, &builds)
	if len(builds.Items) != 1 || builds.Items[0].Review == nil || builds.Items[0].Review.Verdict != "allow" {
		t.Errorf("builds %s", r.body)
	}

	// What the model saw: the code, and no platform secret, nor the
	// tenant's name, nor anything of another tenant.
	llm.mu.Lock()
	defer llm.mu.Unlock()
	if !strings.Contains(llm.bodies[0], "xmrig --url pool.example:3333") {
		t.Errorf("the model was not shown the code: %s", llm.bodies[0])
	}
	for _, body := range llm.bodies {
		for _, never := range []string{admin, tok, otherTok, other, ten, g.env["SLESS_S3_SECRET_KEY"], g.env["SLESS_POSTGRES_URL"], llm.key} {
			if never != "" && strings.Contains(body, never) {
				t.Errorf("a review request holds %q", never)
			}
		}
	}
}

func TestSourceReviewFailOpenLetsThroughWithARecordedWarning(t *testing.T) {
	g := gateway(t)
	llm := newLLMStub(t, "sk-review-test-key-0123456789")
	rg := g.replica(t, llm.env(nil)) // fail open is the default
	ten, tok := rg.tenant(t, nil)
	cases := []struct{ code, reason string }{
		{"# hang-the-reviewer\ndef handler(e, c):\n    return 1\n", "the reviewer did not answer within 500ms"},
		{"# garble-the-reviewer\ndef handler(e, c):\n    return 1\n", "the reviewer's answer was not a verdict"},
	}
	for i, c := range cases {
		fn := "slow" + strconv.Itoa(i)
		r, sha := reviewedUpload(t, rg, ten, tok, fn, c.code)
		expect(t, r, 200, "upload while the reviewer is unavailable")
		var out struct {
			Review struct {
				Verdict string
				Reasons []string
			}
		}
		_ = json.Unmarshal(r.body, &out)
		if out.Review.Verdict != "unavailable" || len(out.Review.Reasons) != 1 || out.Review.Reasons[0] != c.reason {
			t.Errorf("upload answered %s", r.body)
		}
		if ok, _ := rg.store.Exists(t.Context(), objstore.SourceKey(ten, fn, sha)); !ok {
			t.Error("the upload let through was not stored")
		}
		if v := storedVerdict(t, g, ten, sha); v != "unavailable" {
			t.Errorf("recorded verdict %s, want unavailable", v)
		}
		// An unavailable record is no review: the next upload of the
		// digest asks again.
		before := llm.calls()
		r, _ = reviewedUpload(t, rg, ten, tok, fn, c.code)
		expect(t, r, 200, "the same source again")
		if llm.calls() != before+1 {
			t.Error("a digest that got no verdict was not reviewed again")
		}
	}
}

func TestSourceReviewFailClosedAnswers503(t *testing.T) {
	g := gateway(t)
	llm := newLLMStub(t, "sk-review-test-key-0123456789")
	rg := g.replica(t, llm.env(map[string]string{"SLESS_REVIEW_FAIL_OPEN": "false"}))
	ten, tok := rg.tenant(t, nil)
	r, sha := reviewedUpload(t, rg, ten, tok, "slow", "# hang-the-reviewer\ndef handler(e, c):\n    return 1\n")
	expect(t, r, 503, "upload while the reviewer is unavailable, fail closed")
	if r.json(t)["type"] != "https://sless.kube5s.ru/problems/review-unavailable" || r.header.Get("Retry-After") == "" {
		t.Errorf("503 without its type or Retry-After: %v %s", r.header, r.body)
	}
	untouched(t, rg, ten, "slow", sha)
	if v := storedVerdict(t, g, ten, sha); !strings.HasPrefix(v, "none") {
		t.Errorf("fail closed recorded %s", v)
	}
}

// A webhook reviewer gets a signed SourceReview and its deny refuses the
// upload, as the LLM's does.
func TestSourceReviewWebhookIsSignedAndDenies(t *testing.T) {
	g := gateway(t)
	const secret = "whsec_review-webhook-test-0123456789"
	var mu sync.Mutex
	var got []map[string]any
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !webhookSigned(secret, r.Header.Get("X-Sless-Signature"), body) {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var review struct {
			Request map[string]any `json:"request"`
		}
		_ = json.Unmarshal(body, &review)
		mu.Lock()
		got = append(got, review.Request)
		mu.Unlock()
		verdict, reasons := "allow", []string{}
		if strings.Contains(string(body), "os.system") {
			verdict, reasons = "deny", []string{"policy 7: no shell commands"}
		}
		answer, _ := json.Marshal(map[string]any{"apiVersion": "review.sless.kube5s.ru/v1", "kind": "SourceReview",
			"response": map[string]any{"uid": review.Request["uid"], "verdict": verdict, "reasons": reasons}})
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
	}))
	defer hook.Close()
	rg := g.replica(t, map[string]string{"SLESS_REVIEW_MODE": "webhook", "SLESS_REVIEW_WEBHOOK_URL": hook.URL, "SLESS_REVIEW_WEBHOOK_SECRET": secret})
	ten, tok := rg.tenant(t, nil)
	r, sha := reviewedUpload(t, rg, ten, tok, "shell", "import os\ndef handler(e, c):\n    os.system('id')\n")
	expect(t, r, 422, "denied by the webhook")
	if !strings.Contains(string(r.body), "policy 7: no shell commands") {
		t.Errorf("deny problem %s", r.body)
	}
	untouched(t, rg, ten, "shell", sha)
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0]["tenant"] != ten || got[0]["function"] != "shell" || got[0]["source_sha256"] != sha || got[0]["runtime"] != "python3.11" {
		t.Errorf("webhook requests %v", got)
	}
}

func webhookSigned(secret, header string, body []byte) bool {
	var ts, sig string
	for part := range strings.SplitSeq(header, ",") {
		k, v, _ := strings.Cut(part, "=")
		if k == "t" {
			ts = v
		} else if k == "v1" {
			sig = v
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || time.Since(time.Unix(sec, 0)).Abs() > 5*time.Minute {
		return false
	}
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "." + string(body)))
	return hmac.Equal([]byte(hex.EncodeToString(m.Sum(nil))), []byte(sig))
}

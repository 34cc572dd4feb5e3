package review

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// chatServer speaks the chat-completions protocol as OpenAI documents it
// (POST {base}/chat/completions, bearer auth, a JSON body of model,
// messages and response_format), answering with a recorded response from
// testdata/chat, and checks every request it gets.
type chatServer struct {
	t      *testing.T
	apiKey string
	srv    *httptest.Server

	mu       sync.Mutex
	answer   string // the recorded answer: testdata/chat/<answer>; "slow" never answers
	status   int
	pad      int    // bytes of JSON whitespace sent before the recorded answer
	redirect string // when set, the answer is a 307 to this URL
	requests []chatRequest
	bodies   []string
}

type chatRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
	ResponseFormat struct {
		Type       string `json:"type"`
		JSONSchema struct {
			Name   string         `json:"name"`
			Strict bool           `json:"strict"`
			Schema map[string]any `json:"schema"`
		} `json:"json_schema"`
	} `json:"response_format"`
}

func newChatServer(t *testing.T, apiKey string) *chatServer {
	c := &chatServer{t: t, apiKey: apiKey, answer: "allow.json", status: 200}
	c.srv = httptest.NewServer(http.HandlerFunc(c.serve))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *chatServer) URL() string { return c.srv.URL + "/v1" }

func (c *chatServer) set(answer string, status int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.answer, c.status = answer, status
}

func (c *chatServer) serve(w http.ResponseWriter, r *http.Request) {
	fail := func(status int, format string, args ...any) {
		c.t.Errorf("chat server: "+format, args...)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": "bad request", "type": "invalid_request_error"}})
	}
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		fail(404, "%s %s, want POST /v1/chat/completions", r.Method, r.URL.Path)
		return
	}
	if got := r.Header.Get("Authorization"); got != "Bearer "+c.apiKey {
		fail(401, "Authorization %q", got)
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		fail(400, "Content-Type %q", ct)
		return
	}
	var raw strings.Builder
	var req chatRequest
	dec := json.NewDecoder(teeReader{r.Body, &raw})
	if err := dec.Decode(&req); err != nil {
		fail(400, "body: %v", err)
		return
	}
	c.mu.Lock()
	c.requests = append(c.requests, req)
	c.bodies = append(c.bodies, raw.String())
	answer, status, pad, redirect := c.answer, c.status, c.pad, c.redirect
	c.mu.Unlock()
	if answer == "slow" {
		<-r.Context().Done() // answers only when the client gave up
		return
	}
	b, err := os.ReadFile(filepath.Join("testdata", "chat", answer))
	if err != nil {
		c.t.Errorf("recorded answer: %v", err)
	}
	ct := "application/json"
	if strings.HasSuffix(answer, ".html") {
		ct = "text/html"
	}
	w.Header().Set("Content-Type", ct)
	if redirect != "" {
		w.Header().Set("Location", redirect)
		status = http.StatusTemporaryRedirect
	}
	w.WriteHeader(status)
	_, _ = io.WriteString(w, strings.Repeat(" ", pad))
	_, _ = w.Write(b)
}

type teeReader struct {
	r interface{ Read([]byte) (int, error) }
	w *strings.Builder
}

func (t teeReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	t.w.Write(p[:n])
	return n, err
}

func testRequest(t *testing.T) *Request {
	t.Helper()
	zipped := zipOf(t, map[string]string{
		"main.py":          "import os\n\ndef handler(event, context):\n    return {'ok': True}\n",
		"requirements.txt": "requests==2.32.3\n",
	})
	req, err := NewRequest(Meta{Tenant: "acme", Function: "hello", Runtime: "python3.11", Entrypoint: "main.handler", SourceSHA256: "ab12"},
		zipped, testLimits, 1<<10)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func TestLLMVerdicts(t *testing.T) {
	const key = "sk-test-1f0e2d3c4b5a"
	chat := newChatServer(t, key)
	llm := NewLLM(chat.URL(), "gpt-4.1-mini", key, nil)
	cases := []struct {
		answer  string
		status  int
		want    Verdict
		wantErr error // nil: any error will do when want is zero
	}{
		{answer: "allow.json", want: Verdict{Decision: Allow, Reasons: []string{}}},
		{answer: "deny.json", want: Verdict{Decision: Deny, Reasons: []string{
			"mines cryptocurrency: starts xmrig against pool.minexmr.com", "reads the cloud metadata address 169.254.169.254"}}},
		{answer: "warn.json", want: Verdict{Decision: Warn, Reasons: []string{"runs a shell command built from the request body"}}},
		{answer: "refusal.json", wantErr: ErrRefused},
		{answer: "fenced.json", wantErr: ErrMalformed},
		{answer: "prose.json", wantErr: ErrMalformed},
		{answer: "extra-field.json", wantErr: ErrMalformed},
		{answer: "two-objects.json", wantErr: ErrMalformed},
		{answer: "unknown-verdict.json", wantErr: ErrMalformed},
		{answer: "deny-without-reasons.json", wantErr: ErrMalformed},
		{answer: "cut.json", wantErr: ErrMalformed},
		{answer: "content-filter.json", wantErr: ErrMalformed},
		{answer: "no-choices.json", wantErr: ErrMalformed},
		{answer: "rate-limited.json", status: 429},
		{answer: "not-json.html", status: 502},
		{answer: "not-json.html", status: 200},
		{answer: "allow.json", status: 500}, // a verdict with an error status is no verdict
	}
	for _, c := range cases {
		name := c.answer
		if c.status != 0 {
			name += "/" + http.StatusText(c.status)
		}
		t.Run(name, func(t *testing.T) {
			chat.set(c.answer, max(c.status, 200))
			got, err := llm.Review(t.Context(), testRequest(t))
			if c.want.Decision == "" {
				if err == nil {
					t.Fatalf("Review = %+v, want an error", got)
				}
				if c.wantErr != nil && !errors.Is(err, c.wantErr) {
					t.Fatalf("Review error = %v, want %v", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Review: %v", err)
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("verdict (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLLMSlowAnswerIsAnError(t *testing.T) {
	chat := newChatServer(t, "k")
	chat.set("slow", 200)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	got, err := NewLLM(chat.URL(), "m", "k", nil).Review(ctx, testRequest(t))
	if err == nil || ctx.Err() == nil {
		t.Fatalf("Review = %+v, %v; want the deadline's error", got, err)
	}
}

// An answer is read up to maxAnswerBytes: one of that size is a verdict,
// one byte more is an error (the Gate's unavailable), never the verdict
// it holds.
func TestLLMAnswerOverTheCapIsAnError(t *testing.T) {
	chat := newChatServer(t, "k")
	recorded, err := os.ReadFile(filepath.Join("testdata", "chat", "allow.json"))
	if err != nil {
		t.Fatal(err)
	}
	llm := NewLLM(chat.URL(), "m", "k", nil)
	for _, c := range []struct {
		name  string
		size  int
		allow bool
	}{
		{"at the cap", maxAnswerBytes, true},
		{"one byte over", maxAnswerBytes + 1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			chat.mu.Lock()
			chat.pad = c.size - len(recorded)
			chat.mu.Unlock()
			got, err := llm.Review(t.Context(), testRequest(t))
			switch {
			case c.allow && (err != nil || got.Decision != Allow):
				t.Fatalf("Review of %d bytes = %+v, %v; want allow", c.size, got, err)
			case !c.allow && (err == nil || !errors.Is(err, ErrMalformed)):
				t.Fatalf("Review of %d bytes = %+v, %v; want an ErrMalformed", c.size, got, err)
			}
		})
	}
}

// A redirect from the chat endpoint is not followed: the code and the API
// key would go where nobody configured. It is an error (the Gate's
// unavailable) although its body holds a verdict. openai-go refuses a
// redirect to another origin itself; one to the same origin it would
// follow, and the chat server redirecting to itself would see it again.
func TestLLMDoesNotFollowRedirects(t *testing.T) {
	const key = "sk-test-0a1b2c3d4e5f"
	for _, to := range []string{"another origin", "the same origin"} {
		t.Run(to, func(t *testing.T) {
			hop, target := newChatServer(t, key), newChatServer(t, key)
			if to == "the same origin" {
				target = hop
			}
			hop.mu.Lock()
			hop.redirect = target.URL() + "/chat/completions"
			hop.mu.Unlock()
			got, err := NewLLM(hop.URL(), "m", key, nil).Review(t.Context(), testRequest(t))
			if err == nil || !errors.Is(err, ErrMalformed) {
				t.Errorf("Review of a redirect = %+v, %v; want an ErrMalformed", got, err)
			}
			target.mu.Lock()
			followed := len(target.requests)
			target.mu.Unlock()
			if target == hop {
				followed-- // the request the client made
			}
			if followed != 0 {
				t.Errorf("the redirect was followed: %d requests to its target", followed)
			}
		})
	}
}

// The request is the documented protocol, the code sits in a block marked
// as data, and what must not go to the model does not.
func TestLLMRequest(t *testing.T) {
	const key = "sk-test-9a8b7c6d5e4f"
	chat := newChatServer(t, key)
	t.Setenv("OPENAI_ORG_ID", "org-of-the-machine") // the environment is not read
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/elsewhere")
	if _, err := NewLLM(chat.URL(), "gpt-4.1-mini", key, nil).Review(t.Context(), testRequest(t)); err != nil {
		t.Fatal(err)
	}
	chat.mu.Lock()
	defer chat.mu.Unlock()
	if len(chat.requests) != 1 {
		t.Fatalf("%d requests, want 1", len(chat.requests))
	}
	req, body := chat.requests[0], chat.bodies[0]
	if req.Model != "gpt-4.1-mini" || len(req.Messages) != 2 || req.Messages[0].Role != "system" || req.Messages[1].Role != "user" {
		t.Fatalf("request: %+v", req)
	}
	rf := req.ResponseFormat
	if rf.Type != "json_schema" || !rf.JSONSchema.Strict || rf.JSONSchema.Schema["additionalProperties"] != false {
		t.Errorf("response_format: %+v", rf)
	}
	user := req.Messages[1].Content
	open := strings.Index(user, "<<<SOURCE ")
	end := strings.Index(user, "<<<END SOURCE ")
	if open < 0 || end < open {
		t.Fatalf("no delimited block in the user message:\n%s", user)
	}
	nonce := user[open+len("<<<SOURCE ") : open+len("<<<SOURCE ")+32]
	if !strings.Contains(req.Messages[0].Content, "<<<SOURCE "+nonce+">>>") || !strings.Contains(user, "<<<END SOURCE "+nonce+">>>") {
		t.Errorf("the system message does not name the block's nonce %s", nonce)
	}
	block := user[open:end]
	if !strings.Contains(block, `def handler(event, context):\n`) {
		t.Errorf("the code is not in the block as JSON text:\n%s", block)
	}
	for _, never := range []string{key, "acme", "hello", "org-of-the-machine"} {
		if strings.Contains(body, never) {
			t.Errorf("the request holds %q:\n%s", never, body)
		}
	}
}

// A prompt's nonce is fresh for every request and never in the code.
func TestPromptNonce(t *testing.T) {
	req := testRequest(t)
	_, u1, _ := Prompt(req)
	_, u2, _ := Prompt(req)
	if u1 == u2 {
		t.Error("two prompts of one request share their markers")
	}
}

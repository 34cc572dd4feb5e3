package callback

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestSignatureVerifies: what Sign writes, Verify accepts, and any change
// of body, secret or time makes it fail.
func TestSignatureVerifies(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"invocation_id":"i-1","status":"succeeded"}`)
	h := Sign("whsec_a", now, body)
	if !strings.HasPrefix(h, "t=1800000000,v1=") || len(h) != len("t=1800000000,v1=")+64 {
		t.Fatalf("header %q", h)
	}
	if err := Verify("whsec_a", h, body, now.Add(time.Minute)); err != nil {
		t.Fatalf("a fresh signature: %v", err)
	}
	for name, tc := range map[string]struct {
		secret, header string
		body           []byte
		now            time.Time
	}{
		"other body":      {"whsec_a", h, []byte(`{"invocation_id":"i-2"}`), now},
		"other secret":    {"whsec_b", h, body, now},
		"too old":         {"whsec_a", h, body, now.Add(Tolerance + time.Second)},
		"from the future": {"whsec_a", h, body, now.Add(-Tolerance - time.Second)},
		"other timestamp": {"whsec_a", strings.Replace(h, "t=1800000000", "t=1800000001", 1), body, now},
		"no signature":    {"whsec_a", "t=1800000000", body, now},
		"garbage":         {"whsec_a", "sha256=abc", body, now},
	} {
		if err := Verify(tc.secret, tc.header, tc.body, tc.now); !errors.Is(err, ErrBadSignature) {
			t.Errorf("%s: Verify = %v, want ErrBadSignature", name, err)
		}
	}
}

// TestSignatureIsTheDocumentedMAC pins the wire format the docs' snippets
// compute: hex(HMAC-SHA256(secret, "<t>.<body>")).
func TestSignatureIsTheDocumentedMAC(t *testing.T) {
	// python3 -c 'import hmac,hashlib;print(hmac.new(b"whsec_test",b"1700000000.{}",hashlib.sha256).hexdigest())'
	const want = "t=1700000000,v1=35495024f4ef3f94e5a93e22221544c4b75e9a42300cd965ab81cb85cd994e91"
	got := Sign("whsec_test", time.Unix(1_700_000_000, 0), []byte("{}"))
	if got != want {
		t.Errorf("Sign = %s, want %s", got, want)
	}
}

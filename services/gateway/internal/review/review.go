// Package review owns the check of uploaded source before it is stored
// and built: the Reviewer interface and its implementations (none, an
// OpenAI-compatible chat-completions model, a platform team's webhook),
// what a reviewer is sent (Request, built from the archive with sizes
// capped), the one strict parse of a verdict, and the policy (Gate): a
// verdict stored per source digest is reused, never asked for twice; an
// unavailable reviewer lets the upload through with a recorded warning
// (fail open) or refuses it for now (fail closed).
//
// The uploaded code is hostile input to the reviewer too: it goes in a
// delimited block marked as data, only a strict JSON verdict counts (any
// other answer is "unavailable", never "allow"), and the request holds the
// upload and its function's runtime and entrypoint, never a platform
// secret or another tenant's data.
package review

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Decision is a reviewer's answer, or Unavailable when none came.
type Decision string

const (
	Allow Decision = "allow"
	Deny  Decision = "deny"
	Warn  Decision = "warn" // let through, with the reasons shown
	// Unavailable is recorded when the reviewer did not answer usably and
	// the policy let the upload through (fail open); such a record does not
	// count as a review: the next upload of the digest is reviewed.
	Unavailable Decision = "unavailable"
)

// Limits on a verdict's reasons, as stored and shown.
const (
	MaxReasons     = 10
	MaxReasonChars = 500
	// maxAnswerBytes bounds what is read of a reviewer's answer.
	maxAnswerBytes = 64 << 10
)

// Verdict is a reviewer's answer: {"verdict":"allow|deny|warn","reasons":[...]}.
type Verdict struct {
	Decision Decision `json:"verdict"`
	Reasons  []string `json:"reasons"`
}

// ErrMalformed: the reviewer answered, but not with a strict verdict.
var ErrMalformed = errors.New("the reviewer's answer is not a verdict")

// ParseVerdict is the one reading of a verdict, for every reviewer: a
// single JSON object with exactly the fields verdict (allow, deny or
// warn) and reasons (strings; at least one for a deny), and nothing
// before or after it. Reasons are cleaned of control characters and cut
// to MaxReasons of MaxReasonChars each.
func ParseVerdict(b []byte) (Verdict, error) { return parseVerdict(b, nil) }

// parseVerdict parses a verdict; with uid non-nil, the object must also
// carry a string field uid (a webhook's answer), stored there.
func parseVerdict(b []byte, uid *string) (Verdict, error) {
	var raw struct {
		UID      *string   `json:"uid"`
		Decision *Decision `json:"verdict"`
		Reasons  *[]string `json:"reasons"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return Verdict{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Verdict{}, fmt.Errorf("%w: data after the object", ErrMalformed)
	}
	if raw.Decision == nil || raw.Reasons == nil {
		return Verdict{}, fmt.Errorf("%w: verdict and reasons are required", ErrMalformed)
	}
	switch {
	case uid == nil && raw.UID != nil:
		return Verdict{}, fmt.Errorf("%w: unknown field \"uid\"", ErrMalformed)
	case uid != nil && raw.UID == nil:
		return Verdict{}, fmt.Errorf("%w: uid is required", ErrMalformed)
	case uid != nil:
		*uid = *raw.UID
	}
	v := Verdict{Decision: *raw.Decision, Reasons: CleanReasons(*raw.Reasons)}
	switch v.Decision {
	case Allow, Warn:
	case Deny:
		if len(v.Reasons) == 0 {
			return Verdict{}, fmt.Errorf("%w: a deny without reasons", ErrMalformed)
		}
	default:
		return Verdict{}, fmt.Errorf("%w: verdict %q is not allow, deny or warn", ErrMalformed, v.Decision)
	}
	return v, nil
}

// CleanReasons drops empty reasons, replaces control characters and
// caps the count and length: reasons are shown to the tenant and stored.
func CleanReasons(in []string) []string {
	out := []string{}
	for _, r := range in {
		r = strings.TrimSpace(strings.Map(func(c rune) rune {
			if unicode.IsControl(c) || c == utf8.RuneError {
				return ' '
			}
			return c
		}, r))
		if r == "" {
			continue
		}
		if utf8.RuneCountInString(r) > MaxReasonChars {
			r = string([]rune(r)[:MaxReasonChars-1]) + "…"
		}
		out = append(out, r)
		if len(out) == MaxReasons {
			break
		}
	}
	return out
}

// Reviewer judges one upload. An error means no usable answer (the
// reviewer is unreachable, slow, refused or answered malformed); the Gate
// applies the fail-open policy to it.
type Reviewer interface {
	// Name says who reviewed, as stored with the verdict ("llm:<model>",
	// "webhook").
	Name() string
	Review(ctx context.Context, req *Request) (Verdict, error)
}

// SourceReview is the stored verdict of a source digest, shown with the
// upload and the builds of that source.
type SourceReview struct {
	Verdict    Decision  `json:"verdict" enum:"allow,deny,warn,unavailable" doc:"unavailable: the reviewer gave no usable answer and the upload went through (fail open)"`
	Reasons    []string  `json:"reasons"`
	Reviewer   string    `json:"reviewer" doc:"llm:<model> or webhook"`
	LatencyMs  int64     `json:"latency_ms"`
	ReviewedAt time.Time `json:"reviewed_at"`
}

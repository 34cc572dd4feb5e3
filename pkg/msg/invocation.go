package msg

import (
	"strings"
	"time"
)

// Message type names for invocations.
const (
	TypeInvocationRequested = "invocation.requested.v1"
	TypeInvocationCompleted = "invocation.completed.v1"
)

// TriggerKind says what caused an invocation.
type TriggerKind string

// Trigger kinds, also the last word of invocation routing keys.
const (
	TriggerHTTP  TriggerKind = "http"
	TriggerAsync TriggerKind = "async"
	TriggerCron  TriggerKind = "cron"
	TriggerQueue TriggerKind = "queue"
	TriggerJob   TriggerKind = "job"
)

// Request is the HTTP request a function receives. Body is base64 in JSON.
type Request struct {
	Method  string              `json:"method"`
	Path    string              `json:"path"`
	Query   string              `json:"query,omitempty"`
	Headers map[string][]string `json:"headers,omitempty"`
	Body    []byte              `json:"body,omitempty"`
}

// MaxKeptBody is the largest request body kept for a replay; a larger
// one is kept without its body (Kept).
const MaxKeptBody = 256 << 10

// credentials are the request headers never kept for a replay: what
// authenticates a caller is the caller's, not the record's.
var credentials = []string{"Authorization", "Proxy-Authorization", "Cookie", "X-Api-Key", "X-Auth-Token", "X-Amz-Security-Token"}

// KeptRequest is a request as kept for a replay: without credentials or
// the headers that framed its body,
// and without its body when that is over MaxKeptBody (BodyOmitted says
// so, and BodySize how large it was).
type KeptRequest struct {
	Request
	BodyOmitted bool  `json:"body_omitted,omitempty"`
	BodySize    int64 `json:"body_size"`
}

// Kept is r as kept for a replay (KeptRequest). r is not changed.
func (r Request) Kept() KeptRequest {
	k := KeptRequest{Request: r, BodySize: int64(len(r.Body))}
	k.Headers = make(map[string][]string, len(r.Headers))
	for name, v := range r.Headers {
		if !IsCredential(name) && !isFraming(name) {
			k.Headers[name] = v
		}
	}
	if len(r.Body) > MaxKeptBody {
		k.Body, k.BodyOmitted = nil, true
	}
	return k
}

// isFraming tells whether a header frames the body on its way (the body
// a replay sends has its own).
func isFraming(name string) bool {
	return strings.EqualFold(name, "Content-Length") || strings.EqualFold(name, "Transfer-Encoding") || strings.EqualFold(name, "Host")
}

// IsCredential tells whether a header authenticates its caller (never
// kept, never replayed).
func IsCredential(name string) bool {
	for _, c := range credentials {
		if strings.EqualFold(c, name) {
			return true
		}
	}
	return false
}

// JobRef names the FunctionJob run an invocation belongs to.
type JobRef struct {
	Name  string `json:"name"`
	RunID int64  `json:"run_id"`
}

// InvocationRequested asks the invoker to call a function once (async calls,
// cron fires and job runs). InvocationID is the idempotency key end to end.
type InvocationRequested struct {
	InvocationID string      `json:"invocation_id"`
	Tenant       string      `json:"tenant"`
	Namespace    string      `json:"namespace"`
	Function     string      `json:"function"`
	Trigger      TriggerKind `json:"trigger"`
	TriggerName  string      `json:"trigger_name,omitempty"`
	Request      Request     `json:"request"`
	CallbackURL  string      `json:"callback_url,omitempty"`
	// TimeoutSec overrides the function's timeout when positive.
	TimeoutSec int32 `json:"timeout_sec,omitempty"`
	// MaxRetries is how often a failed call is retried.
	MaxRetries int32   `json:"max_retries"`
	Job        *JobRef `json:"job,omitempty"`
	// FunctionVersion is the version the work is pinned to, resolved when
	// it was accepted (pkg/versionpick); retries keep it. 0: not pinned
	// (a message from before versions, or a function without them): the
	// invoker resolves it on the first attempt and keeps it.
	FunctionVersion int32     `json:"function_version,omitempty"`
	ScheduledAt     time.Time `json:"scheduled_at,omitzero"`
	EnqueuedAt      time.Time `json:"enqueued_at"`
	// ReplayOf is the invocation this one runs again (a replay of a kept
	// request or of a dead letter); its record says so.
	ReplayOf string `json:"replay_of,omitempty"`
	// PreWarmed says a cron fire's trigger keeps a replica ready for it
	// (cron.preWarmSeconds): the call finding its version at zero is a
	// pre-warm miss, finding it ready a hit.
	PreWarmed bool `json:"pre_warmed,omitempty"`
}

// HeaderFunctionVersion is the AMQP header that carries the version a
// message accepted unpinned (a queue trigger's message, or one from before
// versions) was pinned to on its first attempt, so that its retries keep
// it: a retry republishes the body as it came, with its headers.
const HeaderFunctionVersion = "x-sless-function-version"

// Type implements Message.
func (*InvocationRequested) Type() string { return TypeInvocationRequested }

// InvocationStatus is the outcome of one invocation.
type InvocationStatus string

// Invocation outcomes, as stored in the history.
const (
	StatusSucceeded InvocationStatus = "succeeded"
	StatusFailed    InvocationStatus = "failed"
	StatusTimeout   InvocationStatus = "timeout"
	StatusRejected  InvocationStatus = "rejected"
)

// InvocationCompleted is the record of one finished invocation. The history
// recorder stores it; the operator reads job results from it.
type InvocationCompleted struct {
	InvocationID string           `json:"invocation_id"`
	Tenant       string           `json:"tenant"`
	Function     string           `json:"function"`
	Trigger      TriggerKind      `json:"trigger"`
	TriggerName  string           `json:"trigger_name,omitempty"`
	Status       InvocationStatus `json:"status"`
	HTTPStatus   int              `json:"http_status,omitempty"`
	Attempts     int32            `json:"attempts"`
	EnqueuedAt   time.Time        `json:"enqueued_at,omitzero"`
	StartedAt    time.Time        `json:"started_at"`
	FinishedAt   time.Time        `json:"finished_at"`
	QueueWaitMs  int64            `json:"queue_wait_ms"`
	DurationMs   int64            `json:"duration_ms"`
	ColdStart    bool             `json:"cold_start"`
	RequestSize  int64            `json:"request_size"`
	ResponseSize int64            `json:"response_size"`
	Error        string           `json:"error,omitempty"`
	TraceID      string           `json:"trace_id,omitempty"`
	// Result holds a small response body inline (base64 in JSON); a large one
	// is stored in S3 under ResultKey.
	Result            []byte  `json:"result,omitempty"`
	ResultKey         string  `json:"result_key,omitempty"`
	ResultContentType string  `json:"result_content_type,omitempty"`
	Job               *JobRef `json:"job,omitempty"`
	// FunctionVersion is the version that answered; 0 unknown (a function
	// from before versions).
	FunctionVersion int32 `json:"function_version,omitempty"`
	// VersionFallback: the work was pinned to a version that no longer
	// served, and ran on latest.
	VersionFallback bool `json:"version_fallback,omitempty"`
	// RequestKey names the request as the function received it (Kept),
	// stored for an invocation that did not succeed, so that it can be
	// replayed; empty: not kept.
	RequestKey string `json:"request_key,omitempty"`
	// ReplayOf is the invocation this one ran again.
	ReplayOf string `json:"replay_of,omitempty"`
}

// Type implements Message.
func (*InvocationCompleted) Type() string { return TypeInvocationCompleted }

// TypeInvocationBatch names a batch of invocation records.
const TypeInvocationBatch = "invocation.completed.batch.v1"

// InvocationBatch carries many invocation records in one message: the
// gateway records every synchronous invocation, and one broker message per
// request would cost more than the request. Its routing key is
// invocation.completed.v1.batch, so the history recorder receives it and
// the job and cron consumers do not.
type InvocationBatch struct {
	Records []InvocationCompleted `json:"records"`
}

// Type implements Message.
func (*InvocationBatch) Type() string { return TypeInvocationBatch }

// TypeCallbackRequested names a callback to deliver.
const TypeCallbackRequested = "callback.requested.v1"

// CallbackRequested asks the invoker to POST an async invocation's record
// to the caller's X-Callback-Url, retrying with backoff.
type CallbackRequested struct {
	URL    string              `json:"url"`
	Record InvocationCompleted `json:"record"`
}

// Type implements Message.
func (*CallbackRequested) Type() string { return TypeCallbackRequested }

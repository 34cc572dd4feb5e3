package ui

import (
	"fmt"
	"strings"
	"time"

	"github.com/kube5s/sless/services/gateway/internal/api"
)

// Finding is one line of the "why did this fail" panel: a likely cause,
// and the evidence it rests on.
type Finding struct {
	Cause    string
	Evidence string
}

// Evidence is what is known about one invocation, joined from its
// record, its function, its log lines and its trace.
type Evidence struct {
	Invocation api.Invocation
	Timeout    time.Duration // the function's timeoutSec; 0 when unknown
	Logs       []api.LogRecord
	LogsKnown  bool // the logs could be read (an empty list then means none)
	SpanErrors []string
	DeadLetter *api.DeadLetter // the invocation was given up on
}

// Diagnose names the likely causes of an invocation's failure, most
// likely first; a success has none.
func Diagnose(e Evidence) []Finding {
	v := e.Invocation
	if v.Status == "succeeded" {
		return nil
	}
	var out []Finding
	add := func(cause, format string, a ...any) {
		out = append(out, Finding{Cause: cause, Evidence: fmt.Sprintf(format, a...)})
	}
	dur := time.Duration(v.DurationMs) * time.Millisecond
	status := 0
	if v.HTTPStatus != nil {
		status = *v.HTTPStatus
	}
	var errLines []string
	for _, l := range e.Logs {
		if l.Level == "error" || l.Stream == "stderr" {
			errLines = append(errLines, l.Message)
		}
	}
	switch {
	case v.Status == "timeout" || status == 504:
		if e.Timeout > 0 {
			add("A timeout", "it ran %s of its %s limit; the runtime stopped it", dur, e.Timeout)
		} else {
			add("A timeout", "the function did not answer in time (%s)", dur)
		}
	case e.Timeout > 0 && dur >= e.Timeout*9/10:
		add("Probably a timeout", "it ran %s, near its %s limit", dur, e.Timeout)
	}
	switch {
	case v.Status == "rejected" && status == 429:
		add("Refused: over a limit", "the tenant's rate or the function's concurrency was full (429); it did not run")
	case v.Status == "rejected" && status == 503:
		add("Refused: the function was not ready", "no replica could take it (503); see the function's status and its last build")
	case v.Status == "rejected":
		add("Refused before it ran", "%s", orNone(v.Error))
	case status == 502:
		add("An unusable answer", "the function's answer was malformed or too large (502)")
	case status >= 500 && status != 504 && e.LogsKnown && len(e.Logs) == 0:
		add("A crash before the handler ran", "a %d with no log line of this invocation: the runtime failed to load or call the handler, or the process died", status)
	case status >= 500 && status != 504 && len(errLines) > 0:
		add("The handler raised an error", "its last error line: %s", errLines[len(errLines)-1])
	case status >= 400 && status < 500:
		add("The function answered a client error", "HTTP %d: the request, not the platform, was refused by the handler", status)
	}
	if d := e.DeadLetter; d != nil {
		add("Given up on", "dead-lettered (%s) after %d attempts%s", d.Reason, d.Attempts, map[bool]string{true: "; it was replayed", false: "; it can be replayed from Dead letters"}[d.ReplayedAt != nil])
	}
	if v.Attempts > 1 {
		add("Retried", "%d attempts; each one failed", v.Attempts)
	}
	if v.ColdStart {
		add("A cold start preceded it", "the replica started for this call; its start-up time counts against the deadline")
	}
	for _, s := range e.SpanErrors {
		add("A span reported an error", "%s", s)
	}
	if v.Error != "" && len(out) == 0 {
		add("The platform recorded an error", "%s", v.Error)
	}
	if len(out) == 0 {
		add("No cause found", "the record, the logs and the trace name none; status %s", v.Status)
	}
	return out
}

func orNone(s string) string {
	if strings.TrimSpace(s) == "" {
		return "no reason was recorded"
	}
	return s
}

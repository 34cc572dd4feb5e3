package msg

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"
)

// Marshal encodes m as JSON, with the bytes json.Marshal makes of it.
// Invocation records and their batches, which the gateway publishes for
// every synchronous call, are written without reflection (a share of the
// cost of recording a call, docs/benchmarks.md); every other message goes
// through encoding/json.
func Marshal(m Message) ([]byte, error) {
	switch v := m.(type) {
	case *InvocationBatch:
		if v != nil {
			size := len(`{"records":[]}`)
			for i := range v.Records {
				size += v.Records[i].sizeHint() + 1
			}
			if b, ok := v.appendJSON(make([]byte, 0, size)); ok {
				return b, nil
			}
		}
	case *InvocationCompleted:
		if v != nil {
			if b, ok := v.appendJSON(make([]byte, 0, v.sizeHint())); ok {
				return b, nil
			}
		}
	}
	return json.Marshal(m)
}

// appendJSON appends the batch as json.Marshal writes it; false when a
// record cannot be written so (a time outside RFC 3339), which
// json.Marshal then refuses with its own error.
func (b *InvocationBatch) appendJSON(dst []byte) ([]byte, bool) {
	dst = append(dst, `{"records":`...)
	if b.Records == nil {
		return append(dst, "null}"...), true
	}
	dst = append(dst, '[')
	for i := range b.Records {
		if i > 0 {
			dst = append(dst, ',')
		}
		var ok bool
		if dst, ok = b.Records[i].appendJSON(dst); !ok {
			return dst, false
		}
	}
	return append(dst, "]}"...), true
}

// sizeHint is about the length of the record in JSON.
func (m *InvocationCompleted) sizeHint() int {
	return 512 + len(m.TriggerName) + len(m.Error) + len(m.ResultKey) + len(m.ResultContentType) + len(m.RequestKey) +
		base64.StdEncoding.EncodedLen(len(m.Result))
}

// appendJSON appends the record as json.Marshal writes it: its fields in
// their order, with their tags' names and omitempty and omitzero rules.
func (m *InvocationCompleted) appendJSON(dst []byte) ([]byte, bool) {
	var ok bool
	dst = append(dst, `{"invocation_id":`...)
	dst = appendString(dst, m.InvocationID)
	dst = append(dst, `,"tenant":`...)
	dst = appendString(dst, m.Tenant)
	dst = append(dst, `,"function":`...)
	dst = appendString(dst, m.Function)
	dst = append(dst, `,"trigger":`...)
	dst = appendString(dst, string(m.Trigger))
	dst = appendOptional(dst, `,"trigger_name":`, m.TriggerName)
	dst = append(dst, `,"status":`...)
	dst = appendString(dst, string(m.Status))
	if m.HTTPStatus != 0 {
		dst = append(dst, `,"http_status":`...)
		dst = strconv.AppendInt(dst, int64(m.HTTPStatus), 10)
	}
	dst = append(dst, `,"attempts":`...)
	dst = strconv.AppendInt(dst, int64(m.Attempts), 10)
	if !m.EnqueuedAt.IsZero() {
		dst = append(dst, `,"enqueued_at":`...)
		if dst, ok = appendTime(dst, m.EnqueuedAt); !ok {
			return dst, false
		}
	}
	dst = append(dst, `,"started_at":`...)
	if dst, ok = appendTime(dst, m.StartedAt); !ok {
		return dst, false
	}
	dst = append(dst, `,"finished_at":`...)
	if dst, ok = appendTime(dst, m.FinishedAt); !ok {
		return dst, false
	}
	dst = append(dst, `,"queue_wait_ms":`...)
	dst = strconv.AppendInt(dst, m.QueueWaitMs, 10)
	dst = append(dst, `,"duration_ms":`...)
	dst = strconv.AppendInt(dst, m.DurationMs, 10)
	dst = append(dst, `,"cold_start":`...)
	dst = strconv.AppendBool(dst, m.ColdStart)
	dst = append(dst, `,"request_size":`...)
	dst = strconv.AppendInt(dst, m.RequestSize, 10)
	dst = append(dst, `,"response_size":`...)
	dst = strconv.AppendInt(dst, m.ResponseSize, 10)
	dst = appendOptional(dst, `,"error":`, m.Error)
	dst = appendOptional(dst, `,"trace_id":`, m.TraceID)
	if len(m.Result) > 0 {
		dst = append(dst, `,"result":"`...)
		dst = base64.StdEncoding.AppendEncode(dst, m.Result)
		dst = append(dst, '"')
	}
	dst = appendOptional(dst, `,"result_key":`, m.ResultKey)
	dst = appendOptional(dst, `,"result_content_type":`, m.ResultContentType)
	if m.Job != nil {
		dst = append(dst, `,"job":{"name":`...)
		dst = appendString(dst, m.Job.Name)
		dst = append(dst, `,"run_id":`...)
		dst = strconv.AppendInt(dst, m.Job.RunID, 10)
		dst = append(dst, '}')
	}
	if m.FunctionVersion != 0 {
		dst = append(dst, `,"function_version":`...)
		dst = strconv.AppendInt(dst, int64(m.FunctionVersion), 10)
	}
	if m.VersionFallback {
		dst = append(dst, `,"version_fallback":true`...)
	}
	dst = appendOptional(dst, `,"request_key":`, m.RequestKey)
	dst = appendOptional(dst, `,"replay_of":`, m.ReplayOf)
	return append(dst, '}'), true
}

// appendTime appends t as time.Time's MarshalJSON writes it; false for a
// time RFC 3339 cannot hold.
func appendTime(dst []byte, t time.Time) ([]byte, bool) {
	dst = append(dst, '"')
	dst, err := t.AppendText(dst)
	if err != nil {
		return dst, false
	}
	return append(dst, '"'), true
}

// appendOptional appends key and s as a JSON string, unless s is empty
// (omitempty).
func appendOptional(dst []byte, key, s string) []byte {
	if s == "" {
		return dst
	}
	return appendString(append(dst, key...), s)
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string as json.Marshal writes it:
// with HTML's <, > and & escaped, invalid UTF-8 as U+FFFD, and U+2028
// and U+2029 escaped.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '\\', '"':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

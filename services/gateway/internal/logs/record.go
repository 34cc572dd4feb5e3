// Package logs reads what a function's processes printed: the local
// driver's file per function (local profile) or the function's pods' logs
// through the Kubernetes API (kubernetes profile). Every line becomes one
// Record; a hostile function's output (NUL bytes, invalid UTF-8, lines of
// megabytes) is cut and cleaned here, so it can never break the stream a
// client reads.
package logs

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"strings"
	"time"
	"unicode/utf8"
)

// Limits of one record.
const (
	// MaxMessage is the most bytes of a record's message; a longer one is
	// cut and marked truncated.
	MaxMessage = 16 << 10
	// MaxLine is the most bytes of a line that are read; the rest of the
	// line is skipped.
	MaxLine = 64 << 10
	// MaxTail bounds Options.Tail.
	MaxTail = 10000
)

// The streams of a record.
const (
	StreamStdout  = "stdout"  // the handler printed it (print, console.log)
	StreamStderr  = "stderr"  // the handler printed it to stderr (print(file=sys.stderr), console.error/warn)
	StreamRuntime = "runtime" // the runtime wrapper's own record (loaded, handler raised, timed out, ...)
	StreamRaw     = "raw"     // a line the wrapper did not frame (a child process or native code writing to the file descriptors)
)

// Record is one line a function's process wrote.
type Record struct {
	Time         time.Time `json:"time" doc:"when the line was written (for raw lines in the local profile: of the record before it)"`
	Stream       string    `json:"stream" enum:"stdout,stderr,runtime,raw" doc:"stdout/stderr: the handler printed it; runtime: the runtime's own record; raw: a line the runtime did not frame"`
	Level        string    `json:"level,omitempty" doc:"the runtime's level: debug, info, warn, error"`
	Message      string    `json:"message" doc:"the text, without its newline; NUL and invalid UTF-8 become U+FFFD; at most 16 KiB"`
	InvocationID string    `json:"invocation_id,omitempty" doc:"the invocation the line belongs to, when the runtime knows it"`
	// FunctionVersion comes from the wrapper's line (its "version" field,
	// SLESS_FUNCTION_VERSION of the process); for a raw line in the
	// kubernetes profile, from the pod's version label.
	FunctionVersion int32  `json:"function_version,omitempty" doc:"the version of the function whose process wrote the line; absent when unknown (a raw line in the local profile, a function from before versions)"`
	Pod             string `json:"pod,omitempty" doc:"kubernetes profile: the replica that wrote it"`
	Truncated       bool   `json:"truncated,omitempty" doc:"the line was longer than the limits and was cut"`
}

// Options select the records.
type Options struct {
	Follow bool      // keep streaming new records until the context ends
	Since  time.Time // zero: from the start of what is kept
	Tail   int       // at most this many records written before the request, per replica
}

// Source streams a function's records to emit, oldest first; with Follow it
// returns when ctx ends. An error from emit ends it.
type Source interface {
	Stream(ctx context.Context, namespace, function string, opt Options, emit func(Record) error) error
}

// wrapperLine is a runtime wrapper's JSON log line (runtimes/README.md).
// The wrappers write msg last, so a cut line still has the other fields.
type wrapperLine struct {
	Time         string `json:"time"`
	Level        string `json:"level"`
	Msg          string `json:"msg"`
	InvocationID string `json:"invocationId"`
	Stream       string `json:"stream"`
	// Version is any: a line that only looks like a wrapper's, with a
	// version that is not a number, is still read.
	Version   any    `json:"version"`
	Error     string `json:"error"`
	Traceback string `json:"traceback"`
	Stack     string `json:"stack"`
}

// Parse turns one line (without its newline) into a record; cut says the
// line was longer than what was read. A line that is not a wrapper's JSON
// record is raw, with a zero time.
func Parse(line []byte, cut bool) Record {
	line = bytes.TrimRight(line, "\r")
	var w wrapperLine
	ok := false
	if len(line) > 0 && line[0] == '{' {
		if err := json.Unmarshal(line, &w); err == nil {
			ok = w.Time != "" || w.Msg != ""
		} else {
			w, ok = partial(line) // cut: what is whole of it
		}
	}
	if !ok {
		msg, short := clean(string(line), 1<<30)
		return Record{Stream: StreamRaw, Message: msg, Truncated: cut || short}
	}
	r := Record{Level: w.Level, Stream: StreamRuntime, FunctionVersion: versionOf(w.Version)}
	r.InvocationID, _ = clean(w.InvocationID, 128)
	r.Level, _ = clean(w.Level, 16)
	if t, err := time.Parse(time.RFC3339Nano, w.Time); err == nil {
		r.Time = t.UTC()
	}
	switch w.Stream {
	case StreamStdout, StreamStderr:
		r.Stream = w.Stream
	}
	msg := w.Msg
	if w.Error != "" {
		msg += ": " + w.Error
	}
	for _, more := range []string{w.Traceback, w.Stack} {
		if more != "" {
			msg += "\n" + strings.TrimRight(more, "\n")
		}
	}
	var short bool
	r.Message, short = clean(msg, 1<<30)
	r.Truncated = cut || short
	return r
}

// versionOf is a wrapper line's version: a whole number from 1, else 0
// (unknown).
func versionOf(v any) int32 {
	f, ok := v.(float64)
	if !ok || f < 1 || f > math.MaxInt32 || f != math.Trunc(f) {
		return 0
	}
	return int32(f)
}

// partial reads the fields of a wrapper's line that was cut: every field
// before msg whole, and msg as far as it goes.
func partial(line []byte) (wrapperLine, bool) {
	var w wrapperLine
	dec := json.NewDecoder(bytes.NewReader(line))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return w, false
	}
	for {
		k, err := dec.Token()
		if err != nil {
			return w, w.Time != ""
		}
		key, _ := k.(string)
		if key == "msg" {
			rest := line[dec.InputOffset():]
			rest = bytes.TrimLeft(rest, " \t:")
			if len(rest) > 0 && rest[0] == '"' {
				w.Msg = unquotePrefix(rest[1:])
			}
			return w, w.Time != ""
		}
		var v any
		if err := dec.Decode(&v); err != nil {
			return w, w.Time != ""
		}
		s, _ := v.(string)
		switch key {
		case "time":
			w.Time = s
		case "level":
			w.Level = s
		case "invocationId":
			w.InvocationID = s
		case "stream":
			w.Stream = s
		case "version":
			w.Version = v
		}
	}
}

// unquotePrefix decodes the JSON string body b (after its opening quote)
// up to its closing quote or as far as it is complete.
func unquotePrefix(b []byte) string {
	var out strings.Builder
	for i := 0; i < len(b) && out.Len() <= MaxMessage; {
		c := b[i]
		switch {
		case c == '"':
			return out.String()
		case c != '\\':
			out.WriteByte(c)
			i++
			continue
		}
		if i+1 >= len(b) {
			break
		}
		switch e := b[i+1]; e {
		case '"', '\\', '/':
			out.WriteByte(e)
		case 'n':
			out.WriteByte('\n')
		case 't':
			out.WriteByte('\t')
		case 'r':
			out.WriteByte('\r')
		case 'b':
			out.WriteByte('\b')
		case 'f':
			out.WriteByte('\f')
		case 'u':
			if i+6 > len(b) {
				return out.String()
			}
			var r rune
			for _, h := range b[i+2 : i+6] {
				r <<= 4
				switch {
				case h >= '0' && h <= '9':
					r |= rune(h - '0')
				case h >= 'a' && h <= 'f':
					r |= rune(h-'a') + 10
				case h >= 'A' && h <= 'F':
					r |= rune(h-'A') + 10
				default:
					return out.String()
				}
			}
			out.WriteRune(r) // a lone surrogate becomes U+FFFD
			i += 6
			continue
		default:
			return out.String()
		}
		i += 2
	}
	return out.String()
}

// clean makes s safe to carry: NUL and invalid UTF-8 become U+FFFD, and it
// is cut to at most limit (and MaxMessage) bytes on a character boundary;
// cut says it was.
func clean(s string, limit int) (string, bool) {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	limit = min(limit, MaxMessage)
	if len(s) <= limit {
		return s, false
	}
	n := limit
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n], true
}

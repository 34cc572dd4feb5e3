package logs

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

func TestParse(t *testing.T) {
	ts := time.Date(2026, 11, 30, 22, 10, 19, 123000000, time.UTC)
	long := strings.Repeat("é", MaxMessage) // 2 bytes each: cut at a character boundary
	for _, tc := range []struct {
		name string
		line string
		cut  bool
		want Record
	}{
		{"python print", `{"time": "2026-11-30T22:10:19.123Z", "level": "info", "invocationId": "inv-1", "function": "f", "stream": "stdout", "msg": "hello"}`, false,
			Record{Time: ts, Stream: StreamStdout, Level: "info", Message: "hello", InvocationID: "inv-1"}},
		{"node console.error", `{"time":"2026-11-30T22:10:19.123Z","level":"error","invocationId":"inv-2","function":"f","stream":"stderr","msg":"bad"}`, false,
			Record{Time: ts, Stream: StreamStderr, Level: "error", Message: "bad", InvocationID: "inv-2"}},
		{"runtime record with traceback", `{"time":"2026-11-30T22:10:19.123Z","level":"error","invocationId":"inv-3","error":"ValueError: x","traceback":"Traceback...\n  line 1\n","msg":"handler raised"}`, false,
			Record{Time: ts, Stream: StreamRuntime, Level: "error", Message: "handler raised: ValueError: x\nTraceback...\n  line 1", InvocationID: "inv-3"}},
		{"an older wrapper's print (msg first, no stream)", `{"time": "2026-11-30T22:10:19Z", "level": "info", "msg": "hi", "invocationId": "inv-4"}`, false,
			Record{Time: ts.Truncate(time.Second), Stream: StreamRuntime, Level: "info", Message: "hi", InvocationID: "inv-4"}},
		{"raw line", "plain text from a child process", false, Record{Stream: StreamRaw, Message: "plain text from a child process"}},
		{"NUL and invalid UTF-8", "a\x00b\xff\xfec\r", false, Record{Stream: StreamRaw, Message: "a\uFFFDb\uFFFDc"}},
		{"NUL inside a wrapper's msg", `{"time":"2026-11-30T22:10:19.123Z","level":"info","stream":"stdout","msg":"x\u0000y"}`, false,
			Record{Time: ts, Stream: StreamStdout, Level: "info", Message: "x\uFFFDy"}},
		{"long raw line", long, false, Record{Stream: StreamRaw, Message: long[:MaxMessage], Truncated: true}},
		{"a wrapper's line cut inside msg", `{"time":"2026-11-30T22:10:19.123Z","level":"info","invocationId":"inv-5","stream":"stdout","msg":"abc\n\u00e9\u00`, true,
			Record{Time: ts, Stream: StreamStdout, Level: "info", Message: "abc\né", InvocationID: "inv-5", Truncated: true}},
		{"a Python line cut inside msg", `{"time": "2026-11-30T22:10:19.123Z", "level": "info", "invocationId": "inv-6", "function": "f", "stream": "stdout", "msg": "xxxx`, true,
			Record{Time: ts, Stream: StreamStdout, Level: "info", Message: "xxxx", InvocationID: "inv-6", Truncated: true}},
		{"not JSON after all", `{not json`, false, Record{Stream: StreamRaw, Message: "{not json"}},
		{"the version the process runs", `{"time": "2026-11-30T22:10:19.123Z", "level": "info", "invocationId": "inv-7", "function": "f", "stream": "stdout", "version": 7, "msg": "hi"}`, false,
			Record{Time: ts, Stream: StreamStdout, Level: "info", Message: "hi", InvocationID: "inv-7", FunctionVersion: 7}},
		{"the version of a line cut inside msg", `{"time":"2026-11-30T22:10:19.123Z","level":"info","stream":"stdout","version":12,"msg":"ab`, true,
			Record{Time: ts, Stream: StreamStdout, Level: "info", Message: "ab", FunctionVersion: 12, Truncated: true}},
		{"a version that is not a version", `{"time":"2026-11-30T22:10:19.123Z","level":"info","version":"7; drop","msg":"x"}`, false,
			Record{Time: ts, Stream: StreamRuntime, Level: "info", Message: "x"}},
		{"a version out of range", `{"time":"2026-11-30T22:10:19.123Z","level":"info","version":4294967296,"msg":"x"}`, false,
			Record{Time: ts, Stream: StreamRuntime, Level: "info", Message: "x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Parse([]byte(tc.line), tc.cut)); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func TestTailOffset(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		content string
		n       int
		want    string
	}{
		{"a\nb\nc\n", 1, "c\n"},
		{"a\nb\nc\n", 2, "b\nc\n"},
		{"a\nb\nc\n", 10, "a\nb\nc\n"},
		{"a\nb\nc", 1, "c"},
		{"a\nb\nc", 2, "b\nc"},
		{"a\nb\nc\n", 0, ""},
		{"", 5, ""},
	} {
		p := filepath.Join(dir, "f")
		if err := os.WriteFile(p, []byte(tc.content), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		off, err := tailOffset(f, tc.n)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got := tc.content[off:]; got != tc.want {
			t.Errorf("tail %d of %q: %q, want %q", tc.n, tc.content, got, tc.want)
		}
	}
}

// TestFilesFollowSeesAppendedLines: a follow sends lines appended after it
// started, holds a line until its newline arrives, survives a megabyte
// line, and ends when its context does.
func TestFilesFollowSeesAppendedLines(t *testing.T) {
	src := Files{Dir: t.TempDir(), Interval: 10 * time.Millisecond}
	path := src.Path("sless-fn-a", "f")
	line := func(msg string) string {
		return `{"time":"` + time.Now().UTC().Format(time.RFC3339Nano) + `","level":"info","stream":"stdout","msg":"` + msg + `"}` + "\n"
	}
	if err := os.WriteFile(path, []byte(line("old-1")+line("old-2")+line("old-3")), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	got := make(chan Record, 100)
	done := make(chan error, 1)
	go func() {
		done <- src.Stream(ctx, "sless-fn-a", "f", Options{Follow: true, Tail: 2}, func(r Record) error { got <- r; return nil })
	}()
	next := func() Record {
		t.Helper()
		select {
		case r := <-got:
			return r
		case <-time.After(10 * time.Second):
			t.Fatal("no record within 10s")
			return Record{}
		}
	}
	for _, want := range []string{"old-2", "old-3"} {
		if r := next(); r.Message != want {
			t.Fatalf("record %q, want %q", r.Message, want)
		}
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, _ = f.WriteString(`{"time":"` + time.Now().UTC().Format(time.RFC3339Nano) + `","level":"info","stream":"stdout","msg":"half`)
	_, _ = f.WriteString(` and the rest"}` + "\n")
	if r := next(); r.Message != "half and the rest" {
		t.Fatalf("record %q", r.Message)
	}
	_, _ = f.WriteString(strings.Repeat("x", 3<<20) + "\n" + line("after the big one"))
	if r := next(); !r.Truncated || len(r.Message) != MaxMessage || r.Stream != StreamRaw {
		t.Fatalf("big line: truncated=%v len=%d stream=%s", r.Truncated, len(r.Message), r.Stream)
	}
	if r := next(); r.Message != "after the big one" {
		t.Fatalf("record %q", r.Message)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("follow did not end with its context")
	}
}

func TestFilesSince(t *testing.T) {
	src := Files{Dir: t.TempDir()}
	old := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339Nano)
	recent := time.Now().UTC().Format(time.RFC3339Nano)
	content := `{"time":"` + old + `","level":"info","msg":"old"}` + "\nraw after old\n" +
		`{"time":"` + recent + `","level":"info","msg":"new"}` + "\nraw after new\n"
	if err := os.WriteFile(src.Path("ns", "f"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	var got []string
	err := src.Stream(t.Context(), "ns", "f", Options{Since: time.Now().Add(-time.Minute), Tail: 100}, func(r Record) error {
		got = append(got, r.Message)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"new", "raw after new"}, got); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
}

// TestPodLogRequest pins the pods/log request each option becomes.
func TestPodLogRequest(t *testing.T) {
	now := time.Date(2026, 11, 30, 22, 0, 0, 0, time.UTC)
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: "https://kube.example:6443"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opt  Options
		want string
	}{
		{"tail", Options{Tail: 100}, "container=function&limitBytes=67108864&tailLines=100&timestamps=true"},
		{"follow since 10m", Options{Follow: true, Since: now.Add(-10 * time.Minute), Tail: 1000}, "container=function&follow=true&sinceSeconds=600&tailLines=1000&timestamps=true"},
		{"since a moment ago", Options{Since: now.Add(-10 * time.Millisecond), Tail: 0}, "container=function&limitBytes=67108864&sinceSeconds=1&tailLines=0&timestamps=true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := cs.CoreV1().Pods("sless-fn-a").GetLogs("f-abc", PodLogOptions(tc.opt, now)).URL()
			if u.Path != "/api/v1/namespaces/sless-fn-a/pods/f-abc/log" {
				t.Errorf("path %s", u.Path)
			}
			want, _ := url.ParseQuery(tc.want)
			if diff := cmp.Diff(want, u.Query()); diff != "" {
				t.Errorf("query (-want +got)\n%s", diff)
			}
		})
	}
}

func TestPodRecord(t *testing.T) {
	r := podRecord([]byte(`2026-11-30T22:10:19.5Z {"time":"2026-11-30T22:10:19.123Z","level":"info","stream":"stdout","invocationId":"i","version":3,"msg":"m"}`), false, "p1", 3)
	want := Record{Time: time.Date(2026, 11, 30, 22, 10, 19, 123000000, time.UTC), Stream: StreamStdout, Level: "info", Message: "m", InvocationID: "i", Pod: "p1", FunctionVersion: 3}
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
	// A raw line takes the version of its pod (its label).
	r = podRecord([]byte("2026-11-30T22:10:19.5Z raw \xff"), false, "p1", 3)
	want = Record{Time: time.Date(2026, 11, 30, 22, 10, 19, 500000000, time.UTC), Stream: StreamRaw, Message: "raw \uFFFD", Pod: "p1", FunctionVersion: 3}
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
}

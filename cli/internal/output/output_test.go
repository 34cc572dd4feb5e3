package output

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

func TestPrint(t *testing.T) {
	raw := json.RawMessage(`[{"name":"a","n":1},{"name":"b c","n":2}]`)
	rows := Rows{Header: []string{"NAME", "N"}, Rows: [][]string{{"a", "1"}, {"b\tc", ""}}}
	tests := []struct {
		name string
		p    Printer
		want string
	}{
		{"piped: plain lines, no header", Printer{}, "a\t1\nb c\t-\n"},
		{"terminal: aligned with a header", Printer{Terminal: true}, "NAME   N\na      1\nb c    -\n"},
		{"terminal with color: bold header", Printer{Terminal: true, Color: true}, "\x1b[1mNAME   N\x1b[0m\na      1\nb c    -\n"},
		{"-o table when piped", Printer{Format: Table}, "NAME   N\na      1\nb c    -\n"},
		{"-o json: the API's objects", Printer{Format: JSON}, "[\n  {\n    \"name\": \"a\",\n    \"n\": 1\n  },\n  {\n    \"name\": \"b c\",\n    \"n\": 2\n  }\n]\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			tt.p.W = &buf
			if err := tt.p.Print(raw, rows); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, buf.String()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	var buf bytes.Buffer
	if err := (&Printer{W: &buf, Format: YAML}).Print(raw, rows); err != nil {
		t.Fatal(err)
	}
	var back any
	if err := yaml.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	var want any
	_ = json.Unmarshal(raw, &want)
	if diff := cmp.Diff(want, back); diff != "" {
		t.Errorf("-o yaml does not read back as the API's objects (-want +got):\n%s", diff)
	}
	if _, err := Parse("xml"); err == nil {
		t.Error("-o xml accepted")
	}
}

func TestSafe(t *testing.T) {
	for in, want := range map[string]string{
		"plain text, ünïcode ✓\tand a tab": "plain text, ünïcode ✓\tand a tab",
		"title \x1b]0;owned\x07 set":       "title \ufffd]0;owned\ufffd set",
		"clipboard \x1b]52;c;ZXZpbA==\x07": "clipboard \ufffd]52;c;ZXZpbA==\ufffd",
		"csi \x9b2J, an invalid byte":      "csi \ufffd2J, an invalid byte",
		"\u009b2J as a rune":               "\ufffd2J as a rune",
		"over\rwrite":                      "over\ufffdwrite",
		"nul\x00 del\x7f":                  "nul\ufffd del\ufffd",
	} {
		if got := Safe(in); got != want {
			t.Errorf("Safe(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSafeLines(t *testing.T) {
	var out bytes.Buffer
	if err := SafeLines(&out, strings.NewReader("one\n\x1b[2Jtwo\nlast without newline"), "  | "); err != nil {
		t.Fatal(err)
	}
	want := "  | one\n  | \ufffd[2Jtwo\n  | last without newline\n"
	if out.String() != want {
		t.Errorf("got %q, want %q", out.String(), want)
	}
}

// TestRecord: a stream's records print as NDJSON lines with -o json and as
// YAML documents with -o yaml, each reading back as the record.
func TestRecord(t *testing.T) {
	recs := []json.RawMessage{json.RawMessage(`{ "message": "a\tb", "n": 1 }`), json.RawMessage(`{"message":"second"}`)}
	var js, ys bytes.Buffer
	for _, r := range recs {
		if err := (&Printer{W: &js, Format: JSON}).Record(r); err != nil {
			t.Fatal(err)
		}
		if err := (&Printer{W: &ys, Format: YAML}).Record(r); err != nil {
			t.Fatal(err)
		}
	}
	if want := "{\"message\":\"a\\tb\",\"n\":1}\n{\"message\":\"second\"}\n"; js.String() != want {
		t.Errorf("-o json: %q, want %q", js.String(), want)
	}
	docs := strings.Split(strings.TrimPrefix(ys.String(), "---\n"), "---\n")
	if len(docs) != len(recs) {
		t.Fatalf("-o yaml: %d documents, want %d: %q", len(docs), len(recs), ys.String())
	}
	for i, d := range docs {
		var got, want any
		if err := yaml.Unmarshal([]byte(d), &got); err != nil {
			t.Fatal(err)
		}
		_ = json.Unmarshal(recs[i], &want)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("document %d (-want +got):\n%s", i, diff)
		}
	}
	if (&Printer{W: &js}).Record(recs[0]) == nil || (&Printer{}).Streamed() || !(&Printer{Format: YAML}).Streamed() {
		t.Error("table output is not a record format")
	}
}

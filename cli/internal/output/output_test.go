package output

import (
	"bytes"
	"encoding/json"
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

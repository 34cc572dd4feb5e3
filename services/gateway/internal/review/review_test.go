package review

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kube5s/sless/pkg/archive"
)

var testLimits = archive.DefaultLimits

func zipOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		w, err := zw.Create(n)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(files[n])); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func TestParseVerdict(t *testing.T) {
	cases := []struct {
		in   string
		want Verdict
		ok   bool
	}{
		{`{"verdict":"allow","reasons":[]}`, Verdict{Allow, []string{}}, true},
		{` {"reasons":["a"],"verdict":"warn"} `, Verdict{Warn, []string{"a"}}, true},
		{`{"verdict":"deny","reasons":["a\u0000b\nc", "  ", "d"]}`, Verdict{Deny, []string{"a b c", "d"}}, true},
		{`{"verdict":"deny","reasons":[]}`, Verdict{}, false},
		{`{"verdict":"deny","reasons":[" "]}`, Verdict{}, false},
		{`{"verdict":"allow"}`, Verdict{}, false},
		{`{"reasons":[]}`, Verdict{}, false},
		{`{"verdict":"ALLOW","reasons":[]}`, Verdict{}, false},
		{`{"verdict":"allow","reasons":[],"uid":"x"}`, Verdict{}, false},
		{`{"verdict":"allow","reasons":[],"note":"x"}`, Verdict{}, false},
		{`{"verdict":"allow","reasons":"none"}`, Verdict{}, false},
		{`{"verdict":"allow","reasons":[]} trailing`, Verdict{}, false},
		{`[{"verdict":"allow","reasons":[]}]`, Verdict{}, false},
		{`allow`, Verdict{}, false},
		{``, Verdict{}, false},
	}
	for _, c := range cases {
		got, err := ParseVerdict([]byte(c.in))
		if c.ok != (err == nil) {
			t.Errorf("ParseVerdict(%q) error = %v, want ok %v", c.in, err, c.ok)
			continue
		}
		if err != nil && !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseVerdict(%q) error = %v, not ErrMalformed", c.in, err)
		}
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("ParseVerdict(%q) (-want +got):\n%s", c.in, diff)
		}
	}
}

func TestCleanReasonsCaps(t *testing.T) {
	many := make([]string, 3*MaxReasons)
	for i := range many {
		many[i] = strings.Repeat("é", 2*MaxReasonChars)
	}
	got := CleanReasons(many)
	if len(got) != MaxReasons {
		t.Fatalf("%d reasons, want %d", len(got), MaxReasons)
	}
	if n := len([]rune(got[0])); n != MaxReasonChars {
		t.Errorf("a reason of %d characters, want %d", n, MaxReasonChars)
	}
}

func TestNewRequest(t *testing.T) {
	code := "def handler(event, context):\n    return 'héllo'\n"
	files := map[string]string{
		"main.py":          code,
		"requirements.txt": "requests\n",
		"a/data.bin":       "\x00\x01\x02",
		"b/long.py":        strings.Repeat("é", 40), // 80 bytes: cut inside a rune
		"c/late.py":        "print(1)\n",
	}
	zipped := zipOf(t, files)
	budget := len(code) + len("requests\n") + 11 // 11 bytes for long.py: 5 runes and half of one
	req, err := NewRequest(Meta{Tenant: "t", Function: "f", Runtime: "python3.11", Entrypoint: "main.handler", SourceSHA256: "s"}, zipped, testLimits, budget)
	if err != nil {
		t.Fatal(err)
	}
	want := &Request{Tenant: "t", Function: "f", Runtime: "python3.11", Entrypoint: "main.handler", SourceSHA256: "s", SourceBytes: int64(len(zipped)),
		TextBytes: len(code) + len("requests\n") + 10,
		Files: []File{
			{Name: "main.py", Size: int64(len(code)), SHA256: digest(code), Text: code},
			{Name: "requirements.txt", Size: 9, SHA256: digest("requests\n"), Text: "requests\n"},
			{Name: "a/data.bin", Size: 3, SHA256: digest("\x00\x01\x02"), Binary: true},
			{Name: "b/long.py", Size: 80, SHA256: digest(files["b/long.py"]), Text: strings.Repeat("é", 5), Truncated: true},
			{Name: "c/late.py", Size: 9, SHA256: digest("print(1)\n"), Truncated: true},
		}}
	if diff := cmp.Diff(want, req); diff != "" {
		t.Errorf("request (-want +got):\n%s", diff)
	}
}

func TestNewRequestListsAtMostMaxFiles(t *testing.T) {
	files := map[string]string{"main.py": "x"}
	for i := range MaxFiles + 5 {
		files[strings.Repeat("d/", 1)+hex.EncodeToString([]byte{byte(i >> 8), byte(i)})+".txt"] = ""
	}
	req, err := NewRequest(Meta{Runtime: "python3.11", Entrypoint: "main.handler"}, zipOf(t, files), testLimits, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(req.Files) != MaxFiles || req.FilesOmitted != 6 || req.Files[0].Name != "main.py" {
		t.Errorf("%d files listed, %d omitted, first %s; want %d, 6, main.py", len(req.Files), req.FilesOmitted, req.Files[0].Name, MaxFiles)
	}
}

// Package output prints what read commands return: an aligned table on a
// terminal, plain tab-separated lines without a header when piped, or the
// API's objects as JSON or YAML (-o json|yaml), byte for byte what the API
// answered, re-indented.
package output

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"sigs.k8s.io/yaml"
)

// Format is the -o flag.
type Format string

const (
	Auto  Format = ""
	Table Format = "table"
	JSON  Format = "json"
	YAML  Format = "yaml"
)

// Parse checks a -o value.
func Parse(s string) (Format, error) {
	switch f := Format(s); f {
	case Auto, Table, JSON, YAML:
		return f, nil
	}
	return "", fmt.Errorf("unknown output format %q: use table, json or yaml", s)
}

// Printer knows where output goes and how it looks.
type Printer struct {
	W        io.Writer
	Format   Format
	Terminal bool // W is a terminal: tables get a header and alignment
	Color    bool // bold headers (a terminal without NO_COLOR)
}

// Rows is a table: a header and one row per object.
type Rows struct {
	Header []string
	Rows   [][]string
}

// Print prints raw (the API's JSON: one object or an array of them) in
// the structured formats, or rows as a table.
func (p *Printer) Print(raw json.RawMessage, rows Rows) error {
	if p.Streamed() {
		b, err := p.structured(raw, false)
		if err == nil {
			_, err = p.W.Write(b)
		}
		return err
	}
	if p.Format == Table || p.Terminal {
		var buf bytes.Buffer
		tw := tabwriter.NewWriter(&buf, 0, 0, 3, ' ', 0)
		fmt.Fprintln(tw, strings.Join(rows.Header, "\t"))
		for _, r := range rows.Rows {
			fmt.Fprintln(tw, strings.Join(clean(r), "\t"))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		out := buf.String()
		if p.Color { // after the alignment: escapes have no width
			h, rest, _ := strings.Cut(out, "\n")
			out = "\033[1m" + h + "\033[0m\n" + rest
		}
		_, err := io.WriteString(p.W, out)
		return err
	}
	for _, r := range rows.Rows {
		if _, err := fmt.Fprintln(p.W, strings.Join(clean(r), "\t")); err != nil {
			return err
		}
	}
	return nil
}

// clean keeps a cell on one line and fills empty cells, so columns stay
// columns for cut and awk; it makes a tenant's text safe for a terminal.
func clean(r []string) []string {
	out := make([]string, len(r))
	for i, c := range r {
		c = Safe(strings.NewReplacer("\t", " ", "\n", " ", "\r", " ").Replace(c))
		if c == "" {
			c = "-"
		}
		out[i] = c
	}
	return out
}

// Safe makes text that a tenant wrote (what a handler printed or answered,
// a build's output, a status message) safe to print on a terminal: every
// control character but tab and newline (ESC, which starts the sequences
// that move the cursor, retitle the window or write the clipboard; CR,
// which overwrites a line; the C1 controls, DEL) and every invalid UTF-8
// byte becomes U+FFFD.
func Safe(s string) string {
	clean := true
	for _, r := range s {
		if unsafe(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if unsafe(r) {
			r = utf8.RuneError
		}
		b.WriteRune(r)
	}
	return b.String()
}

func unsafe(r rune) bool {
	switch {
	case r == '\t' || r == '\n':
		return false
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f, r == utf8.RuneError:
		return true
	}
	return false
}

// SafeLines copies r to w line by line as lines arrive, each after prefix
// and through Safe.
func SafeLines(w io.Writer, r io.Reader, prefix string) error {
	br := bufio.NewReaderSize(r, 32<<10)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			nl := strings.HasSuffix(line, "\n")
			line = prefix + Safe(strings.TrimSuffix(line, "\n"))
			if nl || err == io.EOF {
				line += "\n"
			}
			if _, werr := io.WriteString(w, line); werr != nil {
				return werr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// Streamed reports whether records of a stream (a function's logs, a
// build log's lines) print as structured records: -o json or yaml.
func (p *Printer) Streamed() bool { return p.Format == JSON || p.Format == YAML }

// Record prints one record of a stream as it arrives: -o json as one
// compact line (NDJSON, for jq and for following), -o yaml as one
// document. raw is the record's JSON.
func (p *Printer) Record(raw json.RawMessage) error {
	if !p.Streamed() {
		return fmt.Errorf("print: %q is not a record format", p.Format)
	}
	b, err := p.structured(raw, true)
	if err == nil {
		_, err = p.W.Write(b)
	}
	return err
}

// structured renders raw as -o json (indented; compact, one line, for a
// record of a stream) or -o yaml (a document of its own for a record).
func (p *Printer) structured(raw json.RawMessage, record bool) ([]byte, error) {
	if p.Format == YAML {
		b, err := yaml.JSONToYAML(raw)
		if err != nil {
			return nil, fmt.Errorf("print yaml: %w", err)
		}
		if record {
			b = append([]byte("---\n"), b...)
		}
		return b, nil
	}
	var buf bytes.Buffer
	var err error
	if record {
		err = json.Compact(&buf, raw)
	} else {
		err = json.Indent(&buf, raw, "", "  ")
	}
	if err != nil {
		return nil, fmt.Errorf("print json: %w", err)
	}
	buf.WriteByte('\n')
	return buf.Bytes(), nil
}

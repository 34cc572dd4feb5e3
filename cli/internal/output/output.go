// Package output prints what read commands return: an aligned table on a
// terminal, plain tab-separated lines without a header when piped, or the
// API's objects as JSON or YAML (-o json|yaml), byte for byte what the API
// answered, re-indented.
package output

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

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
	switch p.Format {
	case JSON:
		var buf bytes.Buffer
		if err := json.Indent(&buf, raw, "", "  "); err != nil {
			return fmt.Errorf("print json: %w", err)
		}
		buf.WriteByte('\n')
		_, err := p.W.Write(buf.Bytes())
		return err
	case YAML:
		b, err := yaml.JSONToYAML(raw)
		if err != nil {
			return fmt.Errorf("print yaml: %w", err)
		}
		_, err = p.W.Write(b)
		return err
	}
	if p.Format == Table || p.Terminal {
		tw := tabwriter.NewWriter(p.W, 0, 0, 3, ' ', 0)
		h := strings.Join(rows.Header, "\t")
		if p.Color {
			h = "\033[1m" + h + "\033[0m"
		}
		fmt.Fprintln(tw, h)
		for _, r := range rows.Rows {
			fmt.Fprintln(tw, strings.Join(clean(r), "\t"))
		}
		return tw.Flush()
	}
	for _, r := range rows.Rows {
		if _, err := fmt.Fprintln(p.W, strings.Join(clean(r), "\t")); err != nil {
			return err
		}
	}
	return nil
}

// clean keeps a cell on one line and fills empty cells, so columns stay
// columns for cut and awk.
func clean(r []string) []string {
	out := make([]string, len(r))
	for i, c := range r {
		c = strings.NewReplacer("\t", " ", "\n", " ", "\r", " ").Replace(c)
		if c == "" {
			c = "-"
		}
		out[i] = c
	}
	return out
}

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kube5s/sless/cli/internal/output"
	"github.com/kube5s/sless/pkg/client"
)

// jaegerTrace is the part of Jaeger's query API answer (GET
// /api/traces/{id}) the tree needs.
type jaegerTrace struct {
	Data []struct {
		TraceID string `json:"traceID"`
		Spans   []struct {
			SpanID        string `json:"spanID"`
			OperationName string `json:"operationName"`
			References    []struct {
				RefType string `json:"refType"`
				SpanID  string `json:"spanID"`
			} `json:"references"`
			StartTime int64  `json:"startTime"` // µs since the epoch
			Duration  int64  `json:"duration"`  // µs
			ProcessID string `json:"processID"`
			Tags      []struct {
				Key   string `json:"key"`
				Value any    `json:"value"`
			} `json:"tags"`
		} `json:"spans"`
		Processes map[string]struct {
			ServiceName string `json:"serviceName"`
		} `json:"processes"`
	} `json:"data"`
}

// span is a node of the printed tree.
type span struct {
	id, parent, service, name string
	start, dur                time.Duration
	failed                    bool
	children                  []*span
}

func (a *app) traceCommand() *cobra.Command {
	var traces string
	c := &cobra.Command{
		Use:   "trace INVOCATION_ID",
		Short: "Print an invocation's trace as a tree of spans with their durations",
		Long: `trace reads the invocation's trace id from the API and the trace from the
traces backend's query API (Jaeger's GET /api/traces/{id}), and prints its
spans as a tree: service, operation, start offset and duration.

The backend is --traces, else SLESS_TRACES_URL, else http://127.0.0.1:16686
(make dev's Jaeger).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, p, err := a.reader()
			if err != nil {
				return err
			}
			r, err := client.Do(t.api.GetInvocationWithResponse(cmd.Context(), t.Tenant, args[0]))
			if err != nil {
				return err
			}
			tid := str(r.JSON200.TraceId)
			if tid == "" {
				return fmt.Errorf("invocation %s has no trace id (tracing was off when it ran)", args[0])
			}
			return a.showTrace(cmd, p, traces, traceJSON{TraceID: tid, InvocationID: args[0]})
		},
	}
	a.addTraceFlags(c, &traces)
	return c
}

// addTraceFlags gives a command that prints a trace --traces and -o.
func (a *app) addTraceFlags(c *cobra.Command, traces *string) {
	c.Flags().StringVar(traces, "traces", "", "the traces backend's query API (Jaeger)")
	c.Flags().StringVarP(&a.outputFlag, "output", "o", "", "table (the tree), json or yaml (the tree as data: service, operation, start and duration in µs, children)")
}

// showTrace reads trace meta.TraceID from the traces backend (--traces,
// else SLESS_TRACES_URL, else make dev's Jaeger) and prints it as a tree,
// or as data with -o json|yaml.
func (a *app) showTrace(cmd *cobra.Command, p *output.Printer, traces string, meta traceJSON) error {
	tid := meta.TraceID
	from := "--traces"
	if traces == "" {
		traces, from = a.getenv("SLESS_TRACES_URL"), "SLESS_TRACES_URL"
	}
	if traces == "" {
		traces, from = "http://127.0.0.1:16686", "the default, make dev's Jaeger"
	}
	req, err := http.NewRequestWithContext(cmd.Context(), http.MethodGet, strings.TrimRight(traces, "/")+"/api/traces/"+url.PathEscape(tid), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("read trace %s from %s (%s; --traces or SLESS_TRACES_URL names the traces backend's query API): %w", tid, traces, from, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return fmt.Errorf("read trace %s: %w", tid, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("read trace %s from %s: %s: %s", tid, traces, resp.Status, output.Safe(strings.TrimSpace(string(b[:min(len(b), 300)]))))
	}
	var jt jaegerTrace
	if err := json.Unmarshal(b, &jt); err != nil {
		return fmt.Errorf("read trace %s: %w", tid, err)
	}
	roots := spanTree(&jt)
	if len(roots) == 0 {
		return fmt.Errorf("trace %s has no spans yet (they are exported within seconds; try again)", tid)
	}
	if p.Streamed() { // -o json|yaml: the tree as data
		meta.Spans = spansJSON(roots)
		raw, err := json.Marshal(meta)
		if err != nil {
			return err
		}
		return p.Print(raw, output.Rows{})
	}
	of := "invocation " + meta.InvocationID
	if meta.BuildID != "" {
		of = "build " + meta.BuildID
	}
	fmt.Fprintf(a.stdout, "trace %s (%s)\n", tid, of)
	for i, s := range roots {
		printSpan(a.stdout, s, "", i == len(roots)-1)
	}
	return nil
}

// traceJSON is trace -o json|yaml.
type traceJSON struct {
	TraceID      string     `json:"trace_id"`
	InvocationID string     `json:"invocation_id,omitempty"`
	BuildID      string     `json:"build_id,omitempty"`
	Spans        []spanJSON `json:"spans"`
}

type spanJSON struct {
	Service    string     `json:"service"`
	Operation  string     `json:"operation"`
	StartUS    int64      `json:"start_us"` // from the trace's first span
	DurationUS int64      `json:"duration_us"`
	Error      bool       `json:"error,omitempty"`
	Children   []spanJSON `json:"children,omitempty"`
}

func spansJSON(ss []*span) []spanJSON {
	out := make([]spanJSON, 0, len(ss))
	for _, s := range ss {
		out = append(out, spanJSON{Service: s.service, Operation: s.name, StartUS: s.start.Microseconds(), DurationUS: s.dur.Microseconds(),
			Error: s.failed, Children: spansJSON(s.children)})
	}
	return out
}

// spanTree links the spans of the trace by their CHILD_OF references.
func spanTree(jt *jaegerTrace) []*span {
	byID := map[string]*span{}
	var all []*span
	var t0 int64
	for _, d := range jt.Data {
		for _, s := range d.Spans {
			if t0 == 0 || s.StartTime < t0 {
				t0 = s.StartTime
			}
		}
	}
	for _, d := range jt.Data {
		for _, s := range d.Spans {
			n := &span{id: s.SpanID, service: d.Processes[s.ProcessID].ServiceName, name: s.OperationName,
				start: time.Duration(s.StartTime-t0) * time.Microsecond, dur: time.Duration(s.Duration) * time.Microsecond}
			for _, r := range s.References {
				if r.RefType == "CHILD_OF" {
					n.parent = r.SpanID
				}
			}
			for _, tag := range s.Tags {
				if tag.Key == "error" && fmt.Sprint(tag.Value) == "true" || tag.Key == "otel.status_code" && fmt.Sprint(tag.Value) == "ERROR" {
					n.failed = true
				}
			}
			byID[n.id] = n
			all = append(all, n)
		}
	}
	var roots []*span
	for _, n := range all {
		if p, ok := byID[n.parent]; ok && n.parent != "" {
			p.children = append(p.children, n)
		} else {
			roots = append(roots, n)
		}
	}
	var order func([]*span)
	order = func(ss []*span) {
		sort.SliceStable(ss, func(i, j int) bool { return ss[i].start < ss[j].start })
		for _, s := range ss {
			order(s.children)
		}
	}
	order(roots)
	return roots
}

func printSpan(w io.Writer, s *span, indent string, last bool) {
	branch, next := "├─ ", "│  "
	if last {
		branch, next = "└─ ", "   "
	}
	mark := ""
	if s.failed {
		mark = "  (error)"
	}
	fmt.Fprintf(w, "%s%s%s: %s  +%s %s%s\n", indent, branch, s.service, s.name, round(s.start), round(s.dur), mark)
	for i, c := range s.children {
		printSpan(w, c, indent+next, i == len(s.children)-1)
	}
}

func round(d time.Duration) time.Duration {
	switch {
	case d > time.Second:
		return d.Round(time.Millisecond)
	case d > time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d
}

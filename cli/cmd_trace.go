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
			t, err := a.connect(true)
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
			if traces == "" {
				traces = a.getenv("SLESS_TRACES_URL")
			}
			if traces == "" {
				traces = "http://127.0.0.1:16686"
			}
			req, err := http.NewRequestWithContext(cmd.Context(), http.MethodGet, strings.TrimRight(traces, "/")+"/api/traces/"+url.PathEscape(tid), nil)
			if err != nil {
				return err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return fmt.Errorf("read trace %s: %w", tid, err)
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
			if err != nil {
				return fmt.Errorf("read trace %s: %w", tid, err)
			}
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("read trace %s from %s: %s: %s", tid, traces, resp.Status, strings.TrimSpace(string(b[:min(len(b), 300)])))
			}
			var jt jaegerTrace
			if err := json.Unmarshal(b, &jt); err != nil {
				return fmt.Errorf("read trace %s: %w", tid, err)
			}
			roots := spanTree(&jt)
			if len(roots) == 0 {
				return fmt.Errorf("trace %s has no spans yet (they are exported within seconds; try again)", tid)
			}
			fmt.Fprintf(a.stdout, "trace %s (invocation %s)\n", tid, args[0])
			for i, s := range roots {
				printSpan(a.stdout, s, "", i == len(roots)-1)
			}
			return nil
		},
	}
	c.Flags().StringVar(&traces, "traces", "", "the traces backend's query API (Jaeger)")
	return c
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

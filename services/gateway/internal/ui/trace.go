package ui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"time"
)

// Span is one span of a trace, as the waterfall needs it.
type Span struct {
	ID, Parent string
	Service    string
	Name       string
	Start      time.Time
	Duration   time.Duration
	Error      bool
	Tags       []Tag
}

// Tag is one attribute of a span.
type Tag struct{ Key, Value string }

// Row is a span placed in the waterfall: its depth in the tree and its
// bar as percentages of the trace's span of time.
type Row struct {
	Span
	Depth         int
	Offset, Width float64 // percent of the trace, 0..100
	StartAfter    time.Duration
}

// minWidth keeps a span of no measurable duration visible.
const minWidth = 0.5

// Layout orders spans as a tree, depth first (children by start time,
// then id), and places each bar on the trace's time axis. A span whose
// parent is not in the trace is a root; a cycle cannot hang it. The
// total is from the first start to the last end.
func Layout(spans []Span) (rows []Row, total time.Duration) {
	if len(spans) == 0 {
		return nil, 0
	}
	byID := map[string]bool{}
	first, last := spans[0].Start, spans[0].Start.Add(spans[0].Duration)
	for _, s := range spans {
		byID[s.ID] = true
		if s.Start.Before(first) {
			first = s.Start
		}
		if e := s.Start.Add(s.Duration); e.After(last) {
			last = e
		}
	}
	total = last.Sub(first)
	children := map[string][]Span{}
	var roots []Span
	for _, s := range spans {
		if s.Parent == "" || !byID[s.Parent] || s.Parent == s.ID {
			roots = append(roots, s)
			continue
		}
		children[s.Parent] = append(children[s.Parent], s)
	}
	order := func(ss []Span) {
		sort.SliceStable(ss, func(i, j int) bool {
			if !ss[i].Start.Equal(ss[j].Start) {
				return ss[i].Start.Before(ss[j].Start)
			}
			return ss[i].ID < ss[j].ID
		})
	}
	seen := map[string]bool{}
	var walk func(s Span, depth int)
	walk = func(s Span, depth int) {
		if seen[s.ID] {
			return
		}
		seen[s.ID] = true
		r := Row{Span: s, Depth: depth, StartAfter: s.Start.Sub(first)}
		if total <= 0 {
			r.Offset, r.Width = 0, 100
		} else {
			r.Offset = 100 * float64(s.Start.Sub(first)) / float64(total)
			r.Width = max(minWidth, 100*float64(s.Duration)/float64(total))
			if r.Offset+r.Width > 100 {
				r.Offset = 100 - r.Width
			}
		}
		rows = append(rows, r)
		kids := children[s.ID]
		order(kids)
		for _, k := range kids {
			walk(k, depth+1)
		}
	}
	order(roots)
	for _, s := range roots {
		walk(s, 0)
	}
	// Spans only reachable through a cycle: shown as roots, not lost.
	rest := []Span{}
	for _, s := range spans {
		if !seen[s.ID] {
			rest = append(rest, s)
		}
	}
	order(rest)
	for _, s := range rest {
		walk(s, 0)
	}
	return rows, total
}

// ErrTraceNotFound: the trace store does not have the trace (yet).
var ErrTraceNotFound = errors.New("trace not found")

var traceIDPattern = regexp.MustCompile(`^[0-9a-f]{16,32}$`)

// Traces reads traces from Jaeger's query API.
type Traces struct {
	BaseURL string // e.g. http://127.0.0.1:16686
	Client  *http.Client
}

// jaegerTrace is the part of GET /api/traces/{id} the waterfall reads.
type jaegerTrace struct {
	Data []struct {
		Spans []struct {
			SpanID        string `json:"spanID"`
			OperationName string `json:"operationName"`
			References    []struct {
				RefType string `json:"refType"`
				SpanID  string `json:"spanID"`
			} `json:"references"`
			StartTime int64 `json:"startTime"` // microseconds since the epoch
			Duration  int64 `json:"duration"`  // microseconds
			Tags      []struct {
				Key   string `json:"key"`
				Value any    `json:"value"`
			} `json:"tags"`
			ProcessID string `json:"processID"`
		} `json:"spans"`
		Processes map[string]struct {
			ServiceName string `json:"serviceName"`
		} `json:"processes"`
	} `json:"data"`
}

// Get returns the spans of trace id.
func (t *Traces) Get(ctx context.Context, id string) ([]Span, error) {
	if !traceIDPattern.MatchString(id) {
		return nil, fmt.Errorf("trace id %q is malformed", id)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(t.BaseURL, "/")+"/api/traces/"+id, nil)
	if err != nil {
		return nil, err
	}
	c := t.Client
	if c == nil {
		c = &http.Client{Timeout: 5 * time.Second}
	}
	res, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read trace %s: %w", id, err)
	}
	defer res.Body.Close()
	if res.StatusCode == http.StatusNotFound {
		return nil, ErrTraceNotFound
	}
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("read trace %s: the trace store answered %s", id, res.Status)
	}
	return parseJaeger(io.LimitReader(res.Body, 16<<20))
}

func parseJaeger(r io.Reader) ([]Span, error) {
	var jt jaegerTrace
	if err := json.NewDecoder(r).Decode(&jt); err != nil {
		return nil, fmt.Errorf("decode trace: %w", err)
	}
	var out []Span
	for _, d := range jt.Data {
		for _, s := range d.Spans {
			sp := Span{ID: s.SpanID, Name: s.OperationName, Service: d.Processes[s.ProcessID].ServiceName,
				Start: time.UnixMicro(s.StartTime), Duration: time.Duration(s.Duration) * time.Microsecond}
			for _, ref := range s.References {
				if ref.RefType == "CHILD_OF" || sp.Parent == "" {
					sp.Parent = ref.SpanID
				}
			}
			for _, tg := range s.Tags {
				v := fmt.Sprint(tg.Value)
				if tg.Key == "error" && v == "true" || tg.Key == "otel.status_code" && v == "ERROR" {
					sp.Error = true
				}
				if strings.HasPrefix(tg.Key, "internal.") || tg.Key == "span.kind" {
					continue
				}
				sp.Tags = append(sp.Tags, Tag{Key: tg.Key, Value: v})
			}
			out = append(out, sp)
		}
	}
	if len(out) == 0 {
		return nil, ErrTraceNotFound
	}
	return out, nil
}

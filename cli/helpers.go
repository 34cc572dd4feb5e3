package main

import (
	"encoding/json"
	"fmt"
	"time"
)

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only values made here are printed
	}
	return b
}

// orEmpty makes a nil list print as [] rather than null.
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// items is the "items" array of a list answer, as the API sent it.
func items(body []byte) (json.RawMessage, error) {
	var l struct {
		Items json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(body, &l); err != nil {
		return nil, fmt.Errorf("read the list: %w", err)
	}
	if len(l.Items) == 0 || string(l.Items) == "null" {
		return json.RawMessage("[]"), nil
	}
	return l.Items, nil
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func num[T ~int32 | ~int64](p *T) string {
	if p == nil {
		return ""
	}
	return fmt.Sprint(*p)
}

// ago is a short age ("3m", "2h", "5d").
func ago(t time.Time, now time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := now.Sub(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func ptr[T any](v T) *T { return &v }

func jsonMarshal(v any) ([]byte, error)   { return json.Marshal(v) }
func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

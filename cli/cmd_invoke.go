package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kube5s/sless/cli/internal/output"
	"github.com/kube5s/sless/pkg/client"
	"github.com/kube5s/sless/pkg/headers"
)

// readData is a -d value: @file (@- for stdin) or the text itself.
func readData(d string, stdin io.Reader) ([]byte, error) {
	switch {
	case d == "@-":
		return io.ReadAll(stdin)
	case strings.HasPrefix(d, "@"):
		return os.ReadFile(d[1:])
	}
	return []byte(d), nil
}

func (a *app) invokeCommand() *cobra.Command {
	var data, key, contentType string
	var headerFlags []string
	var async, verbose bool
	c := &cobra.Command{
		Use:   "invoke NAME [-d JSON|@file] [--async] [-H k:v] [--idempotency-key KEY]",
		Short: "Call a function and print its answer (with --async: the invocation id)",
		Long: `invoke calls a function through the API (POST .../functions/NAME/invoke).

Synchronously, the function's answer is printed as it is and the exit code
is 1 when it answered an error status. With --async the call is queued
(Prefer: respond-async) and the invocation id is printed; 'sless
invocations get ID' shows how it went. The invocation id and whether it
was a cold start go to stderr with -v.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := a.connect(true)
			if err != nil {
				return err
			}
			var body []byte
			if data != "" {
				if body, err = readData(data, a.stdin); err != nil {
					return err
				}
			}
			if contentType == "" {
				contentType = "application/json"
				if len(body) > 0 && !json.Valid(body) {
					contentType = "text/plain; charset=utf-8"
				}
			}
			extra := http.Header{}
			for _, h := range headerFlags {
				k, v, ok := strings.Cut(h, ":")
				if !ok || strings.TrimSpace(k) == "" {
					return usagef("-H %q: want name:value", h)
				}
				extra.Add(strings.TrimSpace(k), strings.TrimSpace(v))
			}
			params := &client.InvokeFunctionParams{}
			if async {
				params.Prefer = ptr("respond-async")
			}
			if key != "" {
				params.IdempotencyKey = &key
			}
			addHeaders := func(_ context.Context, r *http.Request) error {
				for k, vs := range extra {
					for _, v := range vs {
						r.Header.Add(k, v)
					}
				}
				return nil
			}
			r, err := t.api.InvokeFunctionWithBodyWithResponse(cmd.Context(), t.Tenant, args[0], params, contentType, bytes.NewReader(body), addHeaders)
			if err != nil {
				return err
			}
			resp := r.HTTPResponse
			if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
				return client.Check(resp, r.Body)
			}
			if verbose {
				fmt.Fprintf(a.stderr, "HTTP %d, invocation %s, cold start: %s\n", resp.StatusCode, resp.Header.Get(headers.InvocationID), orDash(resp.Header.Get(headers.ColdStart)))
			}
			if async && resp.StatusCode == http.StatusAccepted {
				var acc struct {
					InvocationID string `json:"invocation_id"`
				}
				if err := json.Unmarshal(r.Body, &acc); err != nil {
					return fmt.Errorf("read the answer: %w", err)
				}
				fmt.Fprintln(a.stdout, acc.InvocationID)
				return nil
			}
			if isTerminal(a.stdout) {
				// The function's answer is the tenant's bytes: made safe for
				// the terminal; a pipe gets them as they are.
				body := output.Safe(string(r.Body))
				if body != "" && !strings.HasSuffix(body, "\n") {
					body += "\n"
				}
				fmt.Fprint(a.stdout, body)
			} else {
				a.stdout.Write(r.Body)
			}
			if resp.StatusCode >= 400 {
				return fmt.Errorf("the function answered %d (invocation %s)", resp.StatusCode, resp.Header.Get(headers.InvocationID))
			}
			return nil
		},
	}
	c.Flags().StringVarP(&data, "data", "d", "", "the request body: text, @file, or @- for stdin")
	c.Flags().StringVar(&contentType, "content-type", "", "the body's type (default application/json when the body is JSON, else text/plain)")
	c.Flags().StringArrayVarP(&headerFlags, "header", "H", nil, "an extra request header, name:value (repeatable)")
	c.Flags().BoolVar(&async, "async", false, "queue the call and print its invocation id")
	c.Flags().StringVar(&key, "idempotency-key", "", "with --async: the same key names the same invocation for 24 hours")
	c.Flags().BoolVarP(&verbose, "verbose", "v", false, "print the status, invocation id and cold start to stderr")
	return c
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// logRecord is one line of GET .../functions/NAME/logs.
type logRecord struct {
	Time         time.Time `json:"time"`
	Stream       string    `json:"stream"`
	Level        string    `json:"level,omitempty"`
	Message      string    `json:"message"`
	InvocationID string    `json:"invocation_id,omitempty"`
	Version      int32     `json:"function_version,omitempty"`
	Pod          string    `json:"pod,omitempty"`
}

func (a *app) logsCommand() *cobra.Command {
	var follow bool
	var since string
	var tail int64
	c := &cobra.Command{
		Use:   "logs NAME [-f] [--since 10m] [--tail 100]",
		Short: "Print what a function printed, with the version and the invocation each line belongs to; -f follows",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, p, err := a.reader()
			if err != nil {
				return err
			}
			params := &client.GetFunctionLogsParams{}
			if follow {
				params.Follow = &follow
			}
			if since != "" {
				params.Since = &since
			}
			if cmd.Flags().Changed("tail") {
				params.Tail = &tail
			}
			resp, err := t.api.GetFunctionLogs(cmd.Context(), t.Tenant, args[0], params)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if resp.StatusCode >= 400 {
				b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
				return client.Check(resp, b)
			}
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				line := sc.Bytes()
				if len(bytes.TrimSpace(line)) == 0 {
					continue
				}
				var rec logRecord
				if err := json.Unmarshal(line, &rec); err != nil {
					if !p.Streamed() {
						fmt.Fprintln(a.stdout, output.Safe(string(line)))
						continue
					}
					line, _ = json.Marshal(logRecord{Stream: "raw", Message: string(line)})
				}
				if p.Streamed() { // the API's record as it came
					if err := p.Record(line); err != nil {
						return err
					}
					continue
				}
				version := "-"
				if rec.Version != 0 {
					version = "v" + strconv.Itoa(int(rec.Version))
				}
				fmt.Fprintf(a.stdout, "%s %s %s %s %s\n", rec.Time.Local().Format("15:04:05.000"), version, output.Safe(orDash(rec.InvocationID)),
					output.Safe(rec.Stream), output.Safe(rec.Message))
			}
			if err := sc.Err(); err != nil && cmd.Context().Err() == nil {
				return err
			}
			return nil
		},
	}
	c.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new lines until interrupted")
	c.Flags().StringVar(&since, "since", "", "only lines of this last while (10m) or since an RFC 3339 time")
	c.Flags().Int64Var(&tail, "tail", 1000, "at most this many earlier lines (per replica)")
	c.Flags().StringVarP(&a.outputFlag, "output", "o", "", "table (lines: time, version, invocation, stream, message), json (the API's records, one per line) or yaml (one document per record)")
	return c
}

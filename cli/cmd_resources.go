package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/kube5s/sless/cli/internal/output"
	"github.com/kube5s/sless/pkg/client"
)

// ------------------------------------------------------------- triggers

func triggerRows(ts []client.Trigger, now time.Time) output.Rows {
	r := output.Rows{Header: []string{"NAME", "FUNCTION", "TYPE", "PHASE", "WHERE", "AGE"}}
	for _, t := range ts {
		where := ""
		switch {
		case t.Http != nil:
			where = str(t.Status.Url)
			if where == "" {
				where = t.Http.Path
			}
		case t.Cron != nil:
			where = t.Cron.Schedule
		case t.Queue != nil:
			where = t.Queue.Queue
		}
		r.Rows = append(r.Rows, []string{t.Name, t.Function, string(t.Type), str(t.Status.Phase), where, ago(t.CreatedAt, now)})
	}
	return r
}

func (a *app) triggersCommand() *cobra.Command {
	c := group(&cobra.Command{Use: "triggers", Aliases: []string{"trigger"}, Short: "List, read, apply and delete triggers (sless.yaml's triggers are applied by deploy)"})
	var limit int64
	list := &cobra.Command{
		Use: "list", Short: "List the tenant's triggers", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			t, p, err := a.reader()
			if err != nil {
				return err
			}
			r, err := client.Do(t.api.ListTriggersWithResponse(cmd.Context(), t.Tenant, &client.ListTriggersParams{Limit: &limit}))
			if err != nil {
				return err
			}
			raw, err := items(r.Body)
			if err != nil {
				return err
			}
			return p.Print(raw, triggerRows(deref(r.JSON200.Items), time.Now()))
		},
	}
	list.Flags().Int64Var(&limit, "limit", 100, "at most this many")
	get := &cobra.Command{
		Use: "get NAME", Short: "Read a trigger", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, p, err := a.reader()
			if err != nil {
				return err
			}
			r, err := client.Do(t.api.GetTriggerWithResponse(cmd.Context(), t.Tenant, args[0]))
			if err != nil {
				return err
			}
			return p.Print(r.Body, triggerRows([]client.Trigger{*r.JSON200}, time.Now()))
		},
	}
	var file string
	apply := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Create or replace a trigger from a YAML or JSON file (name, function, type and http|cron|queue); - reads stdin",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := a.connect(true)
			if err != nil {
				return err
			}
			var b []byte
			if file == "-" {
				b, err = io.ReadAll(a.stdin)
			} else {
				b, err = os.ReadFile(file)
			}
			if err != nil {
				return err
			}
			var in client.TriggerInput
			if err := yaml.UnmarshalStrict(b, &in); err != nil {
				return usagef("%s: %v", file, err)
			}
			if err := putTrigger(cmd, t, in); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "Trigger %s applied.\n", in.Name)
			return nil
		},
	}
	apply.Flags().StringVarP(&file, "file", "f", "", "the trigger's file")
	_ = apply.MarkFlagRequired("file")
	del := &cobra.Command{
		Use: "delete NAME", Short: "Delete a trigger", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := a.connect(true)
			if err != nil {
				return err
			}
			if _, err := client.Do(t.api.DeleteTriggerWithResponse(cmd.Context(), t.Tenant, args[0])); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "Trigger %s deleted.\n", args[0])
			return nil
		},
	}
	a.addOutputFlag(list)
	a.addOutputFlag(get)
	c.AddCommand(list, get, apply, del)
	return c
}

// putTrigger creates or replaces a trigger (PUT takes the spec: the
// input without its name).
func putTrigger(cmd *cobra.Command, t *target, in client.TriggerInput) error {
	if in.Name == "" {
		return usagef("a trigger needs a name")
	}
	spec := client.TriggerReplacement{Function: in.Function, Type: client.TriggerReplacementType(in.Type), Enabled: in.Enabled, Http: in.Http, Cron: in.Cron, Queue: in.Queue}
	resp, err := t.api.ReplaceTrigger(cmd.Context(), t.Tenant, in.Name, spec)
	_, err = client.Decode(resp, err, nil)
	return err
}

func deref[T any](p *[]T) []T {
	if p == nil {
		return nil
	}
	return *p
}

// ----------------------------------------------------------------- jobs

func jobRows(js []client.Job, now time.Time) output.Rows {
	r := output.Rows{Header: []string{"NAME", "FUNCTION", "RUN", "PHASE", "INVOCATION", "AGE"}}
	for _, j := range js {
		r.Rows = append(r.Rows, []string{j.Name, j.Function, num(j.RunId), str(j.Status.Phase), str(j.Status.InvocationId), ago(j.CreatedAt, now)})
	}
	return r
}

func (a *app) jobsCommand() *cobra.Command {
	c := group(&cobra.Command{Use: "jobs", Aliases: []string{"job"}, Short: "List, read and run jobs (one-off runs of a function)"})
	var limit int64
	list := &cobra.Command{
		Use: "list", Short: "List the tenant's jobs", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			t, p, err := a.reader()
			if err != nil {
				return err
			}
			r, err := client.Do(t.api.ListJobsWithResponse(cmd.Context(), t.Tenant, &client.ListJobsParams{Limit: &limit}))
			if err != nil {
				return err
			}
			raw, err := items(r.Body)
			if err != nil {
				return err
			}
			return p.Print(raw, jobRows(deref(r.JSON200.Items), time.Now()))
		},
	}
	list.Flags().Int64Var(&limit, "limit", 100, "at most this many")
	get := &cobra.Command{
		Use: "get NAME", Short: "Read a job", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, p, err := a.reader()
			if err != nil {
				return err
			}
			r, err := client.Do(t.api.GetJobWithResponse(cmd.Context(), t.Tenant, args[0]))
			if err != nil {
				return err
			}
			return p.Print(r.Body, jobRows([]client.Job{*r.JSON200}, time.Now()))
		},
	}
	var function, data string
	runCmd := &cobra.Command{
		Use:   "run NAME [--function FN] [-d JSON|@file]",
		Short: "Start a new run of a job; with --function, create the job first if it does not exist",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := a.connect(true)
			if err != nil {
				return err
			}
			if function != "" {
				in := client.JobInput{Name: args[0], Function: function}
				if data != "" {
					b, err := readData(data, a.stdin)
					if err != nil {
						return err
					}
					if !json.Valid(b) {
						return usagef("-d: a job's payload is JSON")
					}
					var v any
					_ = json.Unmarshal(b, &v)
					in.Payload = v
				}
				if _, err := client.Do(t.api.CreateJobWithResponse(cmd.Context(), t.Tenant, in)); err != nil {
					if p, ok := err.(*client.Problem); !ok || p.Status != 409 {
						return err
					}
				}
			}
			r, err := client.Do(t.api.RunJobWithResponse(cmd.Context(), t.Tenant, args[0]))
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "Job %s: run %d started ('sless jobs get %s' shows how it went).\n", args[0], r.JSON202.RunId, args[0])
			return nil
		},
	}
	runCmd.Flags().StringVar(&function, "function", "", "create the job for this function when it does not exist")
	runCmd.Flags().StringVarP(&data, "data", "d", "", "the payload of a job created here: JSON, or @file")
	del := &cobra.Command{
		Use: "delete NAME", Short: "Delete a job", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := a.connect(true)
			if err != nil {
				return err
			}
			if _, err := client.Do(t.api.DeleteJobWithResponse(cmd.Context(), t.Tenant, args[0])); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "Job %s deleted.\n", args[0])
			return nil
		},
	}
	a.addOutputFlag(list)
	a.addOutputFlag(get)
	c.AddCommand(list, get, runCmd, del)
	return c
}

// -------------------------------------------------------------- tenants

func tenantRows(ts []client.Tenant, now time.Time) output.Rows {
	r := output.Rows{Header: []string{"NAME", "DISPLAY NAME", "PHASE", "NAMESPACE", "AGE"}}
	for _, t := range ts {
		r.Rows = append(r.Rows, []string{t.Name, str(t.DisplayName), str(t.Status.Phase), str(t.Status.Namespace), ago(t.CreatedAt, now)})
	}
	return r
}

func (a *app) tenantsCommand() *cobra.Command {
	c := group(&cobra.Command{Use: "tenants", Aliases: []string{"tenant"}, Short: "Create, list, read and delete tenants (admin token)"})
	var limit int64
	list := &cobra.Command{
		Use: "list", Short: "List tenants", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			t, err := a.connect(false)
			if err != nil {
				return err
			}
			r, err := client.Do(t.api.ListTenantsWithResponse(cmd.Context(), &client.ListTenantsParams{Limit: &limit}))
			if err != nil {
				return err
			}
			raw, err := items(r.Body)
			if err != nil {
				return err
			}
			return p.Print(raw, tenantRows(deref(r.JSON200.Items), time.Now()))
		},
	}
	list.Flags().Int64Var(&limit, "limit", 100, "at most this many")
	get := &cobra.Command{
		Use: "get NAME", Short: "Read a tenant", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			t, err := a.connect(false)
			if err != nil {
				return err
			}
			r, err := client.Do(t.api.GetTenantWithResponse(cmd.Context(), args[0]))
			if err != nil {
				return err
			}
			return p.Print(r.Body, tenantRows([]client.Tenant{*r.JSON200}, time.Now()))
		},
	}
	var display string
	var existOK bool
	var wait time.Duration
	create := &cobra.Command{
		Use: "create NAME", Short: "Create a tenant", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := a.connect(false)
			if err != nil {
				return err
			}
			in := client.TenantInput{Name: args[0]}
			if display != "" {
				in.DisplayName = &display
			}
			r, err := client.Do(t.api.CreateTenantWithResponse(cmd.Context(), in))
			var p *client.Problem
			switch {
			case existOK && errors.As(err, &p) && p.Status == http.StatusConflict && p.RetryAfter == 0: // not a namesake still being removed
				fmt.Fprintf(a.stdout, "Tenant %s exists.\n", args[0])
			case err != nil:
				return err
			case r.StatusCode() == http.StatusAccepted:
				fmt.Fprintf(a.stdout, "Tenant %s created; its namespace is not ready yet (commands on it wait for it).\n", args[0])
			default:
				fmt.Fprintf(a.stdout, "Tenant %s created ('sless tokens create %s' issues its first token).\n", args[0], args[0])
			}
			if wait == 0 {
				return nil
			}
			deadline := time.Now().Add(wait)
			for {
				r, err := client.Do(t.api.GetTenantWithResponse(cmd.Context(), args[0]))
				if err != nil {
					return err
				}
				phase := str(r.JSON200.Status.Phase)
				if phase == "Ready" {
					fmt.Fprintf(a.stdout, "Tenant %s is ready.\n", args[0])
					return nil
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("tenant %s was not ready within %s (phase %q: %s)", args[0], wait, phase, str(r.JSON200.Status.Message))
				}
				if err := sleep(cmd.Context(), 200*time.Millisecond); err != nil {
					return err
				}
			}
		},
	}
	create.Flags().StringVar(&display, "display-name", "", "a human name")
	create.Flags().BoolVar(&existOK, "exist-ok", false, "a tenant of that name already existing is not an error")
	create.Flags().DurationVar(&wait, "wait", 0, "wait this long for the tenant to be Ready (0: do not wait)")
	del := &cobra.Command{
		Use: "delete NAME", Short: "Delete a tenant and everything it owns", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := a.connect(false)
			if err != nil {
				return err
			}
			if _, err := client.Do(t.api.DeleteTenantWithResponse(cmd.Context(), args[0])); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "Tenant %s is being deleted.\n", args[0])
			return nil
		},
	}
	a.addOutputFlag(list)
	a.addOutputFlag(get)
	c.AddCommand(list, get, create, del)
	return c
}

// tokenRows shows a tenant's tokens: never the tokens themselves, which
// the API does not keep.
func tokenRows(ts []client.Token, now time.Time) output.Rows {
	r := output.Rows{Header: []string{"ID", "NAME", "CREATED", "LAST USED", "REVOKED"}}
	when := func(t *time.Time, none string) string {
		if t == nil {
			return none
		}
		return ago(*t, now) + " ago"
	}
	for _, t := range ts {
		r.Rows = append(r.Rows, []string{t.Id, t.Name, ago(t.CreatedAt, now) + " ago", when(t.LastUsedAt, "never"), when(t.RevokedAt, "-")})
	}
	return r
}

func (a *app) tokensCommand() *cobra.Command {
	c := group(&cobra.Command{Use: "tokens", Aliases: []string{"token"}, Short: "List, issue and revoke tenant tokens (admin token)"})
	var limit int64
	list := &cobra.Command{
		Use: "list TENANT", Short: "List a tenant's tokens, newest first, revoked ones included (last use is up to a minute late)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			t, err := a.connect(false)
			if err != nil {
				return err
			}
			r, err := client.Do(t.api.ListTokensWithResponse(cmd.Context(), args[0], &client.ListTokensParams{Limit: &limit}))
			if err != nil {
				return err
			}
			raw, err := items(r.Body)
			if err != nil {
				return err
			}
			return p.Print(raw, tokenRows(deref(r.JSON200.Items), time.Now()))
		},
	}
	list.Flags().Int64Var(&limit, "limit", 100, "at most this many")
	a.addOutputFlag(list)
	var name string
	create := &cobra.Command{
		Use:   "create TENANT",
		Short: "Issue a token for a tenant; it is printed once (with -o json: the whole answer, id included)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			t, err := a.connect(false)
			if err != nil {
				return err
			}
			in := client.TokenInBody{}
			if name != "" {
				in.Name = &name
			}
			r, err := client.Do(t.api.CreateTokenWithResponse(cmd.Context(), args[0], in))
			if err != nil {
				return err
			}
			if p.Format == output.JSON || p.Format == output.YAML {
				return p.Print(r.Body, output.Rows{})
			}
			fmt.Fprintln(a.stdout, r.JSON201.Token)
			fmt.Fprintf(a.stderr, "Token %s for tenant %s: shown once, keep it (revoke: sless tokens revoke %s %s).\n", r.JSON201.Id, args[0], args[0], r.JSON201.Id)
			return nil
		},
	}
	create.Flags().StringVar(&name, "name", "", "what the token is for")
	a.addOutputFlag(create)
	revoke := &cobra.Command{
		Use: "revoke TENANT ID", Short: "Revoke a tenant token", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := a.connect(false)
			if err != nil {
				return err
			}
			if _, err := client.Do(t.api.RevokeTokenWithResponse(cmd.Context(), args[0], args[1])); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "Token %s revoked.\n", args[1])
			return nil
		},
	}
	c.AddCommand(list, create, revoke)
	return c
}

// ---------------------------------------------------------- invocations

func invocationRows(is []client.Invocation) output.Rows {
	r := output.Rows{Header: []string{"ID", "FUNCTION", "VERSION", "TRIGGER", "STATUS", "HTTP", "DURATION", "COLD", "STARTED"}}
	for _, i := range is {
		version := "-"
		if i.FunctionVersion != nil {
			version = strconv.Itoa(int(*i.FunctionVersion))
			if i.VersionFallback != nil && *i.VersionFallback {
				version += " (fallback)"
			}
		}
		r.Rows = append(r.Rows, []string{i.Id, i.Function, version, i.Trigger, string(i.Status), num(i.HttpStatus),
			(time.Duration(i.DurationMs) * time.Millisecond).String(), strconv.FormatBool(i.ColdStart), i.StartedAt.Local().Format(time.DateTime)})
	}
	return r
}

func (a *app) invocationsCommand() *cobra.Command {
	c := group(&cobra.Command{Use: "invocations", Aliases: []string{"invocation", "inv"}, Short: "List and read invocations, newest first"})
	var limit int64
	var function, status, trigger, since string
	list := &cobra.Command{
		Use: "list", Short: "List invocations, newest first, with the API's filters", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			t, p, err := a.reader()
			if err != nil {
				return err
			}
			params := &client.ListInvocationsParams{Limit: &limit}
			if function != "" {
				params.Function = &function
			}
			if status != "" {
				params.Status = ptr(client.ListInvocationsParamsStatus(status))
			}
			if trigger != "" {
				params.Trigger = ptr(client.ListInvocationsParamsTrigger(trigger))
			}
			if since != "" {
				s, err := client.Since(since, time.Now())
				if err != nil {
					return usagef("--since: %v", err)
				}
				params.Since = &s
			}
			r, err := client.Do(t.api.ListInvocationsWithResponse(cmd.Context(), t.Tenant, params))
			if err != nil {
				return err
			}
			raw, err := items(r.Body)
			if err != nil {
				return err
			}
			return p.Print(raw, invocationRows(deref(r.JSON200.Items)))
		},
	}
	list.Flags().Int64Var(&limit, "limit", 20, "at most this many")
	list.Flags().StringVar(&function, "function", "", "only this function's")
	list.Flags().StringVar(&status, "status", "", "only succeeded, failed, timeout or rejected ones")
	list.Flags().StringVar(&trigger, "trigger", "", "only those of one trigger kind: http, async, cron, queue or job")
	list.Flags().StringVar(&since, "since", "", "only those started since: a duration (10m) or an RFC 3339 time")
	get := &cobra.Command{
		Use: "get ID", Short: "Read an invocation with its timings and stored result", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, p, err := a.reader()
			if err != nil {
				return err
			}
			r, err := client.Do(t.api.GetInvocationWithResponse(cmd.Context(), t.Tenant, args[0]))
			if err != nil {
				return err
			}
			return p.Print(r.Body, invocationRows([]client.Invocation{*r.JSON200}))
		},
	}
	a.addOutputFlag(list)
	a.addOutputFlag(get)
	c.AddCommand(list, get)
	return c
}

// --------------------------------------------------------------- builds

func buildRows(bs []client.Build) output.Rows {
	r := output.Rows{Header: []string{"ID", "FUNCTION", "STATE", "REASON", "SOURCE", "REVIEW", "REQUESTED"}}
	for _, b := range bs {
		review := "-" // uploads are not reviewed
		if b.Review != nil {
			review = string(b.Review.Verdict)
		}
		r.Rows = append(r.Rows, []string{b.Id, b.Function, string(b.State), str(b.Reason), short(b.SourceSha256), review,
			b.RequestedAt.Local().Format(time.DateTime)})
	}
	return r
}

func short(sha string) string { return sha[:min(len(sha), 12)] }

func (a *app) buildsCommand() *cobra.Command {
	c := group(&cobra.Command{Use: "builds", Aliases: []string{"build"}, Short: "List a function's builds and read their logs"})
	var limit int64
	list := &cobra.Command{
		Use: "list FUNCTION", Short: "List a function's builds, newest first", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, p, err := a.reader()
			if err != nil {
				return err
			}
			r, err := client.Do(t.api.ListBuildsWithResponse(cmd.Context(), t.Tenant, args[0], &client.ListBuildsParams{Limit: &limit}))
			if err != nil {
				return err
			}
			raw, err := items(r.Body)
			if err != nil {
				return err
			}
			return p.Print(raw, buildRows(deref(r.JSON200.Items)))
		},
	}
	list.Flags().Int64Var(&limit, "limit", 20, "at most this many")
	var follow bool
	logs := &cobra.Command{
		Use: "logs FUNCTION [BUILD_ID]", Short: "Print a build's log (the newest build's by default); -f follows it until the build ends",
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, p, b, err := a.buildReader(cmd, args)
			if err != nil {
				return err
			}
			id := b.Id
			if !p.Streamed() {
				return streamBuildLog(cmd, t, args[0], id, follow, a.stdout, "")
			}
			body, err := openBuildLog(cmd, t, args[0], id, follow)
			if err != nil {
				return err
			}
			defer body.Close()
			sc := bufio.NewScanner(body)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for n := 1; sc.Scan(); n++ {
				rec, _ := json.Marshal(buildLogLine{Build: id, Line: n, Text: sc.Text()})
				if err := p.Record(rec); err != nil {
					return err
				}
			}
			return sc.Err()
		},
	}
	var traces string
	trace := &cobra.Command{
		Use: "trace FUNCTION [BUILD_ID]", Short: "Print a build's trace (upload, operator, builder) as a tree of spans; the newest build's by default",
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, p, b, err := a.buildReader(cmd, args)
			if err != nil {
				return err
			}
			tid := str(b.TraceId)
			if tid == "" {
				return fmt.Errorf("build %s has no trace id (tracing was off when it ran)", b.Id)
			}
			return a.showTrace(cmd, p, traces, traceJSON{TraceID: tid, BuildID: b.Id})
		},
	}
	a.addTraceFlags(trace, &traces)
	logs.Flags().BoolVarP(&follow, "follow", "f", false, "follow the log until the build ends")
	logs.Flags().StringVarP(&a.outputFlag, "output", "o", "", "table (the log's text), json (one record per line: build, line, text) or yaml (one document per line)")
	a.addOutputFlag(list)
	c.AddCommand(list, logs, trace)
	return c
}

// buildReader is a read command's target and printer, and the build its
// args name: FUNCTION and BUILD_ID, or the function's newest build.
func (a *app) buildReader(cmd *cobra.Command, args []string) (*target, *output.Printer, *client.Build, error) {
	t, p, err := a.reader()
	if err != nil {
		return nil, nil, nil, err
	}
	if len(args) == 2 {
		r, err := client.Do(t.api.GetBuildWithResponse(cmd.Context(), t.Tenant, args[0], args[1]))
		if err != nil {
			return nil, nil, nil, err
		}
		return t, p, r.JSON200, nil
	}
	r, err := client.Do(t.api.ListBuildsWithResponse(cmd.Context(), t.Tenant, args[0], &client.ListBuildsParams{Limit: ptr(int64(1))}))
	if err != nil {
		return nil, nil, nil, err
	}
	bs := deref(r.JSON200.Items)
	if len(bs) == 0 {
		return nil, nil, nil, fmt.Errorf("function %s has no builds yet", args[0])
	}
	return t, p, &bs[0], nil
}

// buildLogLine is one line of a build log, as builds logs -o json|yaml
// prints it.
type buildLogLine struct {
	Build string `json:"build"`
	Line  int    `json:"line"`
	Text  string `json:"text"`
}

// openBuildLog opens a build's log (text), following it if asked.
func openBuildLog(cmd *cobra.Command, t *target, fn, id string, follow bool) (io.ReadCloser, error) {
	resp, err := t.api.GetBuildLog(cmd.Context(), t.Tenant, fn, id, &client.GetBuildLogParams{Follow: &follow})
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 400 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return nil, client.Check(resp, b)
	}
	return resp.Body, nil
}

// streamBuildLog copies a build's log to w, each line after prefix and
// safe for a terminal (the build ran the tenant's code).
func streamBuildLog(cmd *cobra.Command, t *target, fn, id string, follow bool, w io.Writer, prefix string) error {
	body, err := openBuildLog(cmd, t, fn, id, follow)
	if err != nil {
		return err
	}
	defer body.Close()
	return output.SafeLines(w, body, prefix)
}

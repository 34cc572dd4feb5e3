package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kube5s/sless/cli/internal/ziputil"
	"github.com/kube5s/sless/pkg/client"
	"github.com/kube5s/sless/pkg/headers"
)

func (a *app) initCommand() *cobra.Command {
	var runtime, dir string
	c := &cobra.Command{
		Use:   "init --runtime " + strings.Join(runtimeNames(), "|") + " NAME",
		Short: "Create a function directory: sless.yaml (settings and triggers) and a handler",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dir == "" {
				dir = args[0]
			}
			files, err := writeProject(dir, args[0], runtime)
			if err != nil {
				return err
			}
			for _, f := range files {
				fmt.Fprintf(a.stdout, "Created %s\n", f)
			}
			fmt.Fprintf(a.stdout, "Deploy it with: sless deploy %s\n", dir)
			return nil
		},
	}
	c.Flags().StringVar(&runtime, "runtime", "", strings.Join(runtimeNames(), " or "))
	c.Flags().StringVar(&dir, "dir", "", "the directory to create (default: NAME)")
	_ = c.MarkFlagRequired("runtime")
	_ = c.RegisterFlagCompletionFunc("runtime", cobra.FixedCompletions(runtimeNames(), cobra.ShellCompDirectiveNoFileComp))
	return c
}

// progress prints kn-style step lines: the time since the deploy began,
// then what happened.
type progress struct {
	w     io.Writer
	start time.Time
}

func (p *progress) step(format string, args ...any) {
	fmt.Fprintf(p.w, "%7.1fs %s\n", time.Since(p.start).Seconds(), fmt.Sprintf(format, args...))
}

func (a *app) deployCommand() *cobra.Command {
	var timeout time.Duration
	var env []string
	c := &cobra.Command{
		Use:   "deploy [DIR] [--env KEY=VALUE]",
		Short: "Apply a function directory (sless.yaml): settings, source, triggers; wait until it is ready",
		Long: `deploy applies a function directory (default: the current one):

  1. the function's settings from sless.yaml (created, replaced, or left
     alone when they did not change);
  2. the source: the directory zipped deterministically (sorted entries,
     fixed times), uploaded only when its digest differs from the
     function's current source;
  3. sless.yaml's triggers (a trigger of the function not listed there is
     deleted);
  4. the build, its log streamed under the Building line;
  5. the rollout, until the function is Ready; then its URL.

A failed build prints its reason and the log's tail and exits 1; so does a
function that fails to start or is not ready within --timeout.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := "."
			if len(args) == 1 {
				dir = args[0]
			}
			p, err := loadProject(dir)
			if err != nil {
				return err
			}
			for _, kv := range env {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return usagef("--env %q: want KEY=VALUE", kv)
				}
				if p.EnvVars == nil {
					p.EnvVars = &map[string]string{}
				}
				(*p.EnvVars)[k] = v
			}
			t, err := a.connect(true)
			if err != nil {
				return err
			}
			d := &deployer{app: a, cmd: cmd, t: t, p: p, dir: dir, timeout: timeout, pr: &progress{w: a.stdout, start: time.Now()}}
			return d.run()
		},
	}
	c.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "how long to wait for the build and the rollout")
	c.Flags().StringArrayVar(&env, "env", nil, "set an environment variable over sless.yaml's env_vars, KEY=VALUE (repeatable)")
	return c
}

type deployer struct {
	*app
	cmd     *cobra.Command
	t       *target
	p       *project
	dir     string
	timeout time.Duration
	pr      *progress
}

func (d *deployer) run() error {
	ctx := d.cmd.Context()
	api, ten, name := d.t.api, d.t.Tenant, d.p.Name
	fmt.Fprintf(d.stdout, "Deploying %s to tenant %s at %s\n", name, ten, d.t.URL)

	arc, err := ziputil.Pack(d.dir, d.p.Exclude)
	if err != nil {
		return err
	}

	// 1. The function's settings.
	var cur *client.Function
	r, err := client.Do(api.GetFunctionWithResponse(ctx, ten, name, nil))
	switch {
	case client.IsNotFound(err):
		in := client.FunctionInput{Name: name}
		spec := desiredSpec(nil, d.p)
		if err := convert(spec, &in); err != nil {
			return err
		}
		in.Name = name
		cr, err := client.Do(api.CreateFunctionWithResponse(ctx, ten, in))
		if err != nil {
			return err
		}
		cur = cr.JSON201
		d.pr.step("Created function %s", name)
	case err != nil:
		return err
	default:
		cur = r.JSON200
		want := desiredSpec(cur, d.p)
		if sameSpec(specOf(cur), want) {
			d.pr.step("Settings unchanged")
		} else {
			var f client.Function
			resp, err := api.ReplaceFunction(ctx, ten, name, want)
			if _, err := client.Decode(resp, err, &f); err != nil {
				return err
			}
			cur = &f
			d.pr.step("Updated settings of %s", name)
		}
	}

	// 2. The source, when its digest changed.
	before := map[string]bool{}
	if bl, err := client.Do(api.ListBuildsWithResponse(ctx, ten, name, &client.ListBuildsParams{Limit: ptr(int64(10))})); err == nil {
		for _, b := range deref(bl.JSON200.Items) {
			before[b.Id] = true
		}
	}
	uploaded := false
	if cur != nil && cur.Source != nil && cur.Source.Sha256 == arc.SHA256 {
		d.pr.step("Source unchanged (sha256 %s): nothing uploaded", short(arc.SHA256))
	} else {
		up, err := client.UploadZip(ctx, api, ten, name, arc.Bytes)
		if err != nil {
			return err
		}
		uploaded = up.JSON200 != nil && up.JSON200.Changed
		d.pr.step("Uploaded %s, %s (sha256 %s)", plural(len(arc.Files), "file"), size(len(arc.Bytes)), short(arc.SHA256))
		if up.JSON200 != nil && up.JSON200.Review != nil {
			d.pr.step("%s", reviewLine(up.JSON200.Review))
		}
	}

	// 3. The triggers.
	if err := d.applyTriggers(); err != nil {
		return err
	}

	// 4. The build of this source, streamed.
	deadline := time.Now().Add(d.timeout)
	if err := d.followBuild(arc.SHA256, before, uploaded, deadline); err != nil {
		return err
	}

	// 5. The rollout.
	f, err := d.waitReady(arc.SHA256, deadline)
	if err != nil {
		return err
	}
	d.pr.step("Ready")
	url := str(f.Status.Url)
	if url == "" {
		url = fmt.Sprintf("%s/v1/tenants/%s/functions/%s/invoke", strings.TrimRight(d.t.URL, "/"), ten, name)
	}
	fmt.Fprintf(d.stdout, "\nFunction %s is ready: %s\n", name, url)
	for _, tr := range d.p.Triggers {
		if tr.Http != nil {
			fmt.Fprintf(d.stdout, "Trigger %s: %s/fn/%s%s\n", tr.Name, strings.TrimRight(d.t.URL, "/"), ten, tr.Http.Path)
		}
	}
	return nil
}

// applyTriggers puts sless.yaml's triggers and deletes the function's others.
func (d *deployer) applyTriggers() error {
	ctx := d.cmd.Context()
	want := map[string]bool{}
	for _, tr := range d.p.Triggers {
		if err := putTrigger(d.cmd, d.t, tr); err != nil {
			return fmt.Errorf("trigger %s: %w", tr.Name, err)
		}
		want[tr.Name] = true
		d.pr.step("Trigger %s applied (%s)", tr.Name, tr.Type)
	}
	var cursor *string
	for {
		l, err := client.Do(d.t.api.ListTriggersWithResponse(ctx, d.t.Tenant, &client.ListTriggersParams{Limit: ptr(int64(100)), Cursor: cursor}))
		if err != nil {
			return err
		}
		for _, tr := range deref(l.JSON200.Items) {
			if tr.Function == d.p.Name && !want[tr.Name] {
				if _, err := client.Do(d.t.api.DeleteTriggerWithResponse(ctx, d.t.Tenant, tr.Name)); err != nil && !client.IsNotFound(err) {
					return err
				}
				d.pr.step("Trigger %s removed (not in %s)", tr.Name, projectFile)
			}
		}
		if str(l.JSON200.NextCursor) == "" {
			return nil
		}
		cursor = l.JSON200.NextCursor
	}
}

// followBuild finds the build of sha (a new one after an upload), streams
// its log under the Building line, and fails with its reason and log tail.
func (d *deployer) followBuild(sha string, before map[string]bool, uploaded bool, deadline time.Time) error {
	ctx := d.cmd.Context()
	api, ten, name := d.t.api, d.t.Tenant, d.p.Name
	var build *client.Build
	for build == nil {
		l, err := client.Do(api.ListBuildsWithResponse(ctx, ten, name, &client.ListBuildsParams{Limit: ptr(int64(10))}))
		if err != nil {
			return err
		}
		for _, b := range deref(l.JSON200.Items) {
			if b.SourceSha256 == sha && (!uploaded || !before[b.Id]) {
				build = &b
				break
			}
		}
		if build != nil {
			break
		}
		f, err := client.Do(api.GetFunctionWithResponse(ctx, ten, name, nil))
		if err != nil {
			return err
		}
		if str(f.JSON200.Status.BuiltSourceSha256) == sha && !uploaded {
			return nil // built before; nothing to follow
		}
		if f.JSON200.Image != nil && *f.JSON200.Image != "" {
			return nil // a prebuilt image: no build
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no build of source %s started within the timeout (function phase %q: %s)", short(sha), str(f.JSON200.Status.Phase), str(f.JSON200.Status.Message))
		}
		if err := sleep(ctx, 300*time.Millisecond); err != nil {
			return err
		}
	}
	if build.State == client.BuildStateSucceeded && !uploaded {
		return nil
	}
	d.pr.step("Building (build %s)", build.Id)
	if err := streamBuildLog(d.cmd, d.t, name, build.Id, true, d.stdout, "         | "); err != nil {
		return err
	}
	// The log ends when the build does; its record says how.
	for {
		b, err := client.Do(api.GetBuildWithResponse(ctx, ten, name, build.Id))
		if err != nil {
			return err
		}
		switch b.JSON200.State {
		case client.BuildStateSucceeded:
			d.pr.step("Built")
			return nil
		case client.BuildStateFailed:
			return d.buildFailed(b.JSON200)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("build %s did not finish within the timeout (state %s)", build.Id, b.JSON200.State)
		}
		if err := sleep(ctx, 300*time.Millisecond); err != nil {
			return err
		}
	}
}

// buildFailed prints the reason and the tail of the log, for exit code 1.
func (d *deployer) buildFailed(b *client.Build) error {
	d.pr.step("Build failed: %s", strings.TrimSpace(str(b.Reason)+": "+str(b.Message)))
	var buf bytes.Buffer
	if err := streamBuildLog(d.cmd, d.t, d.p.Name, b.Id, false, &buf, ""); err == nil {
		lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
		from := max(0, len(lines)-20)
		fmt.Fprintf(d.stderr, "Error: build %s of %s failed: %s\n", b.Id, d.p.Name, strings.TrimSpace(str(b.Reason)+": "+str(b.Message)))
		fmt.Fprintf(d.stderr, "Build log (last %d lines; 'sless builds logs %s %s' has all):\n", len(lines)-from, d.p.Name, b.Id)
		for _, l := range lines[from:] {
			fmt.Fprintln(d.stderr, "  "+l)
		}
	} else {
		fmt.Fprintf(d.stderr, "Error: build %s of %s failed: %s (its log could not be read: %v)\n", b.Id, d.p.Name, str(b.Reason), err)
	}
	return errReported
}

// waitReady waits until the function runs its current settings and the
// source sha: Deployed once the rollout of the built source started, then
// Ready; Failed ends the wait with its message. It waits with GET
// ?wait=ready&source_sha256= (the gateway answers once that digest serves
// for the current spec, or cannot; X-Sless-Wait says how), and polls a
// gateway that does not wait.
func (d *deployer) waitReady(sha string, deadline time.Time) (*client.Function, error) {
	ctx := d.cmd.Context()
	deployed := false
	built := func(f *client.Function) bool {
		return str(f.Status.BuiltSourceSha256) == sha || (f.Image != nil && *f.Image != "")
	}
	// A first look, to show the rollout under way.
	if r, err := client.Do(d.t.api.GetFunctionWithResponse(ctx, d.t.Tenant, d.p.Name, nil)); err == nil && built(r.JSON200) && str(r.JSON200.Status.Phase) == "Deploying" {
		d.pr.step("Deployed")
		deployed = true
	}
	for {
		left := time.Until(deadline)
		params := &client.GetFunctionParams{Wait: ptr(client.GetFunctionParamsWaitReady), Timeout: ptr(max(min(left, 60*time.Second), time.Second).Round(time.Second).String())}
		if d.p.Image == nil || *d.p.Image == "" {
			params.SourceSha256 = ptr(sha) // ready means this digest serves (the gateway's api/wait.go judges)
		}
		r, err := client.Do(d.t.api.GetFunctionWithResponse(ctx, d.t.Tenant, d.p.Name, params))
		if err != nil {
			return nil, err
		}
		f := r.JSON200
		phase := str(f.Status.Phase)
		outcome := r.HTTPResponse.Header.Get(headers.Wait)
		if outcome == "" && built(f) && phase == "Ready" && f.Status.Ready {
			outcome = "ready" // a gateway that does not wait
		}
		switch outcome {
		case "ready":
			if !deployed {
				d.pr.step("Deployed")
			}
			return f, nil
		case "failed":
			fmt.Fprintf(d.stderr, "Error: function %s failed: %s\n", d.p.Name, str(f.Status.Message))
			return nil, errReported
		}
		if !deployed && built(f) && phase == "Deploying" {
			d.pr.step("Deployed")
			deployed = true
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("function %s was not ready within the timeout (phase %q: %s)", d.p.Name, phase, str(f.Status.Message))
		}
		if outcome == "" {
			if err := sleep(ctx, 300*time.Millisecond); err != nil {
				return nil, err
			}
		}
	}
}

func sleep(ctx interface{ Done() <-chan struct{} }, d time.Duration) error {
	select {
	case <-ctx.Done():
		return errors.New("interrupted")
	case <-time.After(d):
		return nil
	}
}

func size(n int) string {
	switch {
	case n < 1024:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/1024)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// convert copies between API types with the same JSON fields.
func convert(from, to any) error {
	b, err := jsonMarshal(from)
	if err != nil {
		return err
	}
	return jsonUnmarshal(b, to)
}

// reviewLine says what the installation's source review made of the
// upload (a deny never gets here: the upload answered 422 with its
// reasons).
func reviewLine(r *client.SourceReview) string {
	var reasons string
	if r.Reasons != nil && len(*r.Reasons) > 0 {
		reasons = ": " + strings.Join(*r.Reasons, "; ")
	}
	took := (time.Duration(r.LatencyMs) * time.Millisecond).String()
	switch r.Verdict {
	case "unavailable":
		return fmt.Sprintf("Warning: not reviewed (%s gave no verdict; uploaded anyway)%s", r.Reviewer, reasons)
	case "warn":
		return fmt.Sprintf("Review: warn (%s, %s)%s", r.Reviewer, took, reasons)
	}
	return fmt.Sprintf("Review: %s (%s, %s)%s", r.Verdict, r.Reviewer, took, reasons)
}

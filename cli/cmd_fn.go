package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kube5s/sless/cli/internal/output"
	"github.com/kube5s/sless/pkg/client"
)

func functionRows(fs []client.Function, now time.Time) output.Rows {
	r := output.Rows{Header: []string{"NAME", "RUNTIME", "PHASE", "READY", "URL", "AGE"}}
	for _, f := range fs {
		r.Rows = append(r.Rows, []string{f.Name, string(f.Runtime), str(f.Status.Phase), fmt.Sprint(f.Status.Ready), str(f.Status.Url), ago(f.CreatedAt, now)})
	}
	return r
}

// functionDetail is fn get's row: fn list's, with the replicas and the
// scaling reasons of the function's serving versions.
func functionDetail(f client.Function, now time.Time) output.Rows {
	r := functionRows([]client.Function{f}, now)
	replicas, scaling := scalingOf(f)
	r.Header = append(r.Header[:4:4], append([]string{"REPLICAS", "SCALING"}, r.Header[4:]...)...)
	r.Rows[0] = append(r.Rows[0][:4:4], append([]string{replicas, scaling}, r.Rows[0][4:]...)...)
	return r
}

// scalingOf sums the ready and desired replicas of f's serving versions
// ("ready/desired") and names each version's scaling reason ("v2:Load").
func scalingOf(f client.Function) (replicas, scaling string) {
	serving := deref(f.Status.Serving)
	if len(serving) == 0 {
		return "", ""
	}
	var ready, desired int32
	reasons := make([]string, 0, len(serving))
	for _, s := range serving {
		ready, desired = ready+s.ReadyReplicas, desired+s.DesiredReplicas
		if reason := str(s.ScalingReason); reason != "" {
			reasons = append(reasons, fmt.Sprintf("v%d:%s", s.Version, reason))
		}
	}
	return fmt.Sprintf("%d/%d", ready, desired), strings.Join(reasons, ",")
}

func (a *app) fnCommand() *cobra.Command {
	c := group(&cobra.Command{Use: "fn", Aliases: []string{"functions"}, Short: "List, read and delete functions ('sless deploy' creates and updates them)"})
	var limit int64
	list := &cobra.Command{
		Use:   "list",
		Short: "List the tenant's functions",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			t, p, err := a.reader()
			if err != nil {
				return err
			}
			r, err := client.Do(t.api.ListFunctionsWithResponse(cmd.Context(), t.Tenant, &client.ListFunctionsParams{Limit: &limit}))
			if err != nil {
				return err
			}
			raw, err := items(r.Body)
			if err != nil {
				return err
			}
			var fs []client.Function
			if r.JSON200 != nil && r.JSON200.Items != nil {
				fs = *r.JSON200.Items
			}
			return p.Print(raw, functionRows(fs, time.Now()))
		},
	}
	list.Flags().Int64Var(&limit, "limit", 100, "at most this many")
	get := &cobra.Command{
		Use:   "get NAME",
		Short: "Read a function",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, p, err := a.reader()
			if err != nil {
				return err
			}
			r, err := client.Do(t.api.GetFunctionWithResponse(cmd.Context(), t.Tenant, args[0], nil))
			if err != nil {
				return err
			}
			return p.Print(r.Body, functionDetail(*r.JSON200, time.Now()))
		},
	}
	del := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a function (its triggers stop; it disappears when its cleanup is done)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := a.connect(true)
			if err != nil {
				return err
			}
			if _, err := client.Do(t.api.DeleteFunctionWithResponse(cmd.Context(), t.Tenant, args[0])); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "Function %s deleted.\n", args[0])
			return nil
		},
	}
	a.addOutputFlag(list)
	a.addOutputFlag(get)
	c.AddCommand(list, get, del)
	return c
}

// reader is the target and printer of a read command.
func (a *app) reader() (*target, *output.Printer, error) {
	p, err := a.printer()
	if err != nil {
		return nil, nil, err
	}
	t, err := a.connect(true)
	if err != nil {
		return nil, nil, err
	}
	return t, p, nil
}

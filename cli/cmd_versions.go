package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kube5s/sless/cli/internal/output"
	"github.com/kube5s/sless/pkg/client"
)

// ------------------------------------------------------------- versions

func versionRows(vs []client.Version, now time.Time) output.Rows {
	r := output.Rows{Header: []string{"VERSION", "LATEST", "TRAFFIC", "TAGS", "READY", "SOURCE", "RUNTIME", "AGE"}}
	for _, v := range vs {
		traffic, tags, ready := "-", "", "-"
		if s := v.Serving; s != nil {
			traffic, tags, ready = fmt.Sprintf("%d%%", s.Percent), strings.Join(deref(s.Tags), ","), strconv.FormatBool(s.Ready)
			if s.Draining != nil && *s.Draining {
				traffic += " (draining)"
			}
		}
		latest := ""
		if v.Latest {
			latest = "latest"
		}
		r.Rows = append(r.Rows, []string{strconv.Itoa(int(v.Version)), latest, traffic, tags, ready, short(str(v.SourceSha256)), v.Runtime, ago(v.CreatedAt, now)})
	}
	return r
}

func servingRows(f client.Function) output.Rows {
	r := output.Rows{Header: []string{"VERSION", "PERCENT", "TAGS", "READY", "DRAINING", "REPLICAS", "SCALING"}}
	for _, s := range deref(f.Status.Serving) {
		r.Rows = append(r.Rows, []string{strconv.Itoa(int(s.Version)), fmt.Sprintf("%d%%", s.Percent), strings.Join(deref(s.Tags), ","),
			strconv.FormatBool(s.Ready), strconv.FormatBool(s.Draining != nil && *s.Draining),
			fmt.Sprintf("%d/%d", s.ReadyReplicas, s.DesiredReplicas), str(s.ScalingReason)})
	}
	return r
}

func (a *app) versionsCommand() *cobra.Command {
	c := group(&cobra.Command{Use: "versions", Short: "List, read and publish a function's versions"})
	list := &cobra.Command{
		Use: "list FUNCTION", Short: "List a function's versions, newest first, with their traffic", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, p, err := a.reader()
			if err != nil {
				return err
			}
			r, err := client.Do(t.api.ListVersionsWithResponse(cmd.Context(), t.Tenant, args[0]))
			if err != nil {
				return err
			}
			raw, err := items(r.Body)
			if err != nil {
				return err
			}
			return p.Print(raw, versionRows(deref(r.JSON200.Items), time.Now()))
		},
	}
	get := &cobra.Command{
		Use: "get FUNCTION N", Short: "Read one version", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := versionArg(args[1])
			if err != nil {
				return err
			}
			t, p, err := a.reader()
			if err != nil {
				return err
			}
			r, err := client.Do(t.api.GetVersionWithResponse(cmd.Context(), t.Tenant, args[0], int64(n)))
			if err != nil {
				return err
			}
			return p.Print(r.Body, versionRows([]client.Version{*r.JSON200}, time.Now()))
		},
	}
	publish := &cobra.Command{
		Use: "publish FUNCTION", Short: "The version of the function's current template, once published (nothing new when unchanged)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, p, err := a.reader()
			if err != nil {
				return err
			}
			r, err := client.Do(t.api.PublishVersionWithResponse(cmd.Context(), t.Tenant, args[0]))
			if err != nil {
				return err
			}
			var v client.Version
			if err := json.Unmarshal(r.Body, &v); err != nil {
				return err
			}
			return p.Print(r.Body, versionRows([]client.Version{v}, time.Now()))
		},
	}
	for _, s := range []*cobra.Command{list, get, publish} {
		a.addOutputFlag(s)
	}
	c.AddCommand(list, get, publish)
	return c
}

// versionArg reads "7" or "v7".
func versionArg(s string) (int32, error) {
	n, err := strconv.ParseInt(strings.TrimPrefix(s, "v"), 10, 32)
	if err != nil || n < 1 {
		return 0, usagef("%q is not a version number (7 or v7)", s)
	}
	return int32(n), nil
}

// parseTraffic reads "v7=90 latest=10" and --tag canary=latest|v7 into a
// split: each tag is its own entry at 0 % unless a share names the same
// target, which then carries the tag.
func parseTraffic(shares, tags []string) ([]client.TrafficTarget, error) {
	var out []client.TrafficTarget
	index := map[string]int{}
	target := func(s string) (client.TrafficTarget, error) {
		if s == "latest" {
			return client.TrafficTarget{Latest: ptr(true)}, nil
		}
		n, err := versionArg(s)
		if err != nil {
			return client.TrafficTarget{}, usagef("%q is neither latest nor a version (v7)", s)
		}
		return client.TrafficTarget{Version: &n}, nil
	}
	for _, s := range shares {
		k, v, ok := strings.Cut(s, "=")
		pct, err := strconv.Atoi(strings.TrimSuffix(v, "%"))
		if !ok || err != nil {
			return nil, usagef("%q: a share is TARGET=PERCENT (v7=90, latest=10)", s)
		}
		t, err := target(k)
		if err != nil {
			return nil, err
		}
		t.Percent = int32(pct)
		index[k] = len(out)
		out = append(out, t)
	}
	for _, s := range tags {
		tag, k, ok := strings.Cut(s, "=")
		if !ok || tag == "" {
			return nil, usagef("--tag %q: a tag is NAME=TARGET (canary=latest, stable=v7)", s)
		}
		if i, shared := index[k]; shared && out[i].Tag == nil {
			out[i].Tag = &tag
			continue
		}
		t, err := target(k)
		if err != nil {
			return nil, err
		}
		t.Tag = &tag
		out = append(out, t)
	}
	return out, nil
}

func (a *app) trafficCommand() *cobra.Command {
	c := group(&cobra.Command{Use: "traffic", Short: "Split a function's calls over its versions"})
	var tags []string
	set := &cobra.Command{
		Use: "set FUNCTION TARGET=PERCENT... [--tag NAME=TARGET]", Short: "Set the split (summing to 100) and the tags, e.g. sless traffic set hello v7=90 latest=10 --tag canary=latest",
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			traffic, err := parseTraffic(args[1:], tags)
			if err != nil {
				return err
			}
			t, p, err := a.reader()
			if err != nil {
				return err
			}
			r, err := client.Do(t.api.SetTrafficWithResponse(cmd.Context(), t.Tenant, args[0], client.TrafficInput{Traffic: &traffic}))
			if err != nil {
				return err
			}
			return p.Print(r.Body, servingRows(*r.JSON200))
		},
	}
	set.Flags().StringArrayVar(&tags, "tag", nil, "NAME=TARGET: a stable route (invoke FUNCTION@NAME); repeatable")
	a.addOutputFlag(set)
	c.AddCommand(set)
	return c
}

func (a *app) rollbackCommand() *cobra.Command {
	var to string
	var noWait bool
	c := &cobra.Command{
		Use: "rollback FUNCTION [--to N]", Short: "Send all untagged calls to a version (default: the one before the version serving most)",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var body client.RollbackInput
			if to != "" {
				n, err := versionArg(to)
				if err != nil {
					return err
				}
				body.To = &n
			}
			t, p, err := a.reader()
			if err != nil {
				return err
			}
			params := &client.RollbackParams{}
			if !noWait {
				params.Prefer = ptr("wait")
			}
			r, err := client.Do(t.api.RollbackWithResponse(cmd.Context(), t.Tenant, args[0], params, body))
			if err != nil {
				return err
			}
			var f client.Function
			if err := json.Unmarshal(r.Body, &f); err != nil {
				return err
			}
			if r.StatusCode() == 202 && !noWait {
				fmt.Fprintln(a.stderr, "The traffic is set; the flip had not happened within 30s ('sless fn get' shows when it does).")
			}
			return p.Print(r.Body, servingRows(f))
		},
	}
	c.Flags().StringVar(&to, "to", "", "the version to roll back to (7 or v7)")
	c.Flags().BoolVar(&noWait, "no-wait", false, "answer once the traffic is set, without waiting for the flip")
	a.addOutputFlag(c)
	return c
}

package provider

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-log/tflog"

	slessclient "github.com/kube5s/sless/pkg/client"
)

// client calls the gateway through the typed client generated from its
// OpenAPI document (pkg/client): the requests and answers are that
// package's types, the one definition of the wire format. Each call checks
// the answer (a transport error, or the problem the API answered) and
// names the operation and its subject in the error.
type client struct {
	api *slessclient.ClientWithResponses
}

// platformWait is how long a call waits out answers that ask to be
// repeated (503 or 409 with Retry-After: a tenant whose namespace is being
// made or removed, a quota being counted), within the operation's context.
const platformWait = 5 * time.Minute

func newClient(url, token, version string) (*client, error) {
	c, err := slessclient.New(url, token, "terraform-provider-sless/"+version,
		slessclient.WithHTTPClient(&http.Client{Timeout: 6 * time.Minute}), // the longest wait=ready is 5m
		slessclient.WithWaits(platformWait, func(ctx context.Context, w slessclient.Wait) {
			if w.Problem != nil {
				tflog.Info(ctx, "waiting for the platform: "+w.Problem.Detail, map[string]any{"request": w.Method + " " + w.Path, "retry_in": w.After.String()})
			}
		}))
	if err != nil {
		return nil, err
	}
	return &client{api: c}, nil
}

// isNotFound says whether err (wrapped or not) is a 404 answer.
func isNotFound(err error) bool {
	var p *slessclient.Problem
	return errors.As(err, &p) && p.Status == http.StatusNotFound
}

// object is the object an answer carries: the first of the bodies the
// document lists for its success statuses that was set. None set (a body
// that is not JSON) is an error, never an empty object: a half-read
// answer must not pass for the object (a failed wait once left the
// function's name empty in the state, so that destroy deleted nothing).
func object[T any](what string, status int, bodies ...*T) (*T, error) {
	for _, b := range bodies {
		if b != nil {
			return b, nil
		}
	}
	return nil, fmt.Errorf("%s: the answer (%d) carries no JSON object", what, status)
}

// ---------------------------------------------------------------- calls

func (c *client) getFunction(ctx context.Context, tenant, name string) (*slessclient.Function, error) {
	what := "read function " + tenant + "/" + name
	r, err := slessclient.Do(c.api.GetFunctionWithResponse(ctx, tenant, name, nil))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return object(what, r.StatusCode(), r.JSON200)
}

// waitFunction answers once the source sum serves, or cannot (its build
// failed, it failed to run, another source replaced it), or after wait:
// the gateway's wait=ready watch judges, and outcome is its X-Sless-Wait
// (ready, failed or timeout).
func (c *client) waitFunction(ctx context.Context, tenant, name, sum string, wait time.Duration) (f *slessclient.Function, outcome string, err error) {
	what := "wait for function " + tenant + "/" + name
	ready, timeout := slessclient.GetFunctionParamsWaitReady, wait.String()
	r, err := slessclient.Do(c.api.GetFunctionWithResponse(ctx, tenant, name, &slessclient.GetFunctionParams{Wait: &ready, Timeout: &timeout, SourceSha256: &sum}))
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", what, err)
	}
	if f, err = object(what, r.StatusCode(), r.JSON200); err != nil {
		return nil, "", err
	}
	if r.Headers200 != nil && r.Headers200.XSlessWait != nil {
		outcome = *r.Headers200.XSlessWait
	}
	return f, outcome, nil
}

func (c *client) createFunction(ctx context.Context, tenant string, in slessclient.FunctionInput) (*slessclient.Function, error) {
	what := "create function " + tenant + "/" + in.Name
	r, err := slessclient.Do(c.api.CreateFunctionWithResponse(ctx, tenant, in))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return object(what, r.StatusCode(), r.JSON201)
}

func (c *client) replaceFunction(ctx context.Context, tenant, name string, spec slessclient.FunctionReplacement) (*slessclient.Function, error) {
	what := "replace function " + tenant + "/" + name
	r, err := slessclient.Do(c.api.ReplaceFunctionWithResponse(ctx, tenant, name, spec))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return object(what, r.StatusCode(), r.JSON200, r.JSON201)
}

func (c *client) deleteFunction(ctx context.Context, tenant, name string) error {
	if _, err := slessclient.Do(c.api.DeleteFunctionWithResponse(ctx, tenant, name)); err != nil {
		return fmt.Errorf("delete function %s/%s: %w", tenant, name, err)
	}
	return nil
}

func (c *client) uploadSource(ctx context.Context, tenant, name string, zip []byte) error {
	_, err := slessclient.UploadZip(ctx, c.api, tenant, name, zip)
	if err != nil {
		return fmt.Errorf("upload the source of %s/%s: %w", tenant, name, err)
	}
	return nil
}

func (c *client) getBuild(ctx context.Context, tenant, name, id string) (*slessclient.Build, error) {
	what := "read build " + id
	r, err := slessclient.Do(c.api.GetBuildWithResponse(ctx, tenant, name, id))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return object(what, r.StatusCode(), r.JSON200)
}

func (c *client) buildLog(ctx context.Context, tenant, name, id string) (string, error) {
	r, err := slessclient.Do(c.api.GetBuildLogWithResponse(ctx, tenant, name, id, nil))
	if err != nil {
		return "", fmt.Errorf("read the log of build %s: %w", id, err)
	}
	return string(r.Body), nil // text/plain: the document gives it no model
}

// setTraffic sets the function's split (PUT .../traffic).
func (c *client) setTraffic(ctx context.Context, tenant, name string, traffic []slessclient.TrafficTarget) error {
	if _, err := slessclient.Do(c.api.SetTrafficWithResponse(ctx, tenant, name, slessclient.TrafficInput{Traffic: &traffic})); err != nil {
		return fmt.Errorf("set the traffic of function %s/%s: %w", tenant, name, err)
	}
	return nil
}

// resetTraffic gives the function the platform's default split (100 %
// latest): a merge patch of an empty traffic list (PUT .../traffic takes
// one entry at least, and a function PUT without traffic keeps it).
func (c *client) resetTraffic(ctx context.Context, tenant, name string) error {
	_, err := slessclient.Do(c.api.PatchFunctionWithBodyWithResponse(ctx, tenant, name, nil, "application/merge-patch+json", strings.NewReader(`{"traffic":[]}`)))
	if err != nil {
		return fmt.Errorf("reset the traffic of function %s/%s: %w", tenant, name, err)
	}
	return nil
}

func (c *client) getVersion(ctx context.Context, tenant, name string, n int64) (*slessclient.Version, error) {
	what := fmt.Sprintf("read version %d of function %s/%s", n, tenant, name)
	r, err := slessclient.Do(c.api.GetVersionWithResponse(ctx, tenant, name, n))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return object(what, r.StatusCode(), r.JSON200)
}

func (c *client) getTrigger(ctx context.Context, tenant, name string) (*slessclient.Trigger, error) {
	what := "read trigger " + tenant + "/" + name
	r, err := slessclient.Do(c.api.GetTriggerWithResponse(ctx, tenant, name))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return object(what, r.StatusCode(), r.JSON200)
}

func (c *client) putTrigger(ctx context.Context, tenant, name string, spec slessclient.TriggerReplacement) (*slessclient.Trigger, error) {
	what := "replace trigger " + tenant + "/" + name
	r, err := slessclient.Do(c.api.ReplaceTriggerWithResponse(ctx, tenant, name, spec))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return object(what, r.StatusCode(), r.JSON200, r.JSON201)
}

func (c *client) createTrigger(ctx context.Context, tenant string, in slessclient.TriggerInput) (*slessclient.Trigger, error) {
	what := "create trigger " + tenant + "/" + in.Name
	r, err := slessclient.Do(c.api.CreateTriggerWithResponse(ctx, tenant, in))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return object(what, r.StatusCode(), r.JSON201)
}

func (c *client) deleteTrigger(ctx context.Context, tenant, name string) error {
	if _, err := slessclient.Do(c.api.DeleteTriggerWithResponse(ctx, tenant, name)); err != nil {
		return fmt.Errorf("delete trigger %s/%s: %w", tenant, name, err)
	}
	return nil
}

func (c *client) getJob(ctx context.Context, tenant, name string) (*slessclient.Job, error) {
	what := "read job " + tenant + "/" + name
	r, err := slessclient.Do(c.api.GetJobWithResponse(ctx, tenant, name))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return object(what, r.StatusCode(), r.JSON200)
}

func (c *client) createJob(ctx context.Context, tenant string, in slessclient.JobInput) (*slessclient.Job, error) {
	what := "create job " + tenant + "/" + in.Name
	r, err := slessclient.Do(c.api.CreateJobWithResponse(ctx, tenant, in))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return object(what, r.StatusCode(), r.JSON201)
}

func (c *client) putJob(ctx context.Context, tenant, name string, spec slessclient.JobReplacement) (*slessclient.Job, error) {
	what := "replace job " + tenant + "/" + name
	r, err := slessclient.Do(c.api.ReplaceJobWithResponse(ctx, tenant, name, spec))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return object(what, r.StatusCode(), r.JSON200, r.JSON201)
}

func (c *client) deleteJob(ctx context.Context, tenant, name string) error {
	if _, err := slessclient.Do(c.api.DeleteJobWithResponse(ctx, tenant, name)); err != nil {
		return fmt.Errorf("delete job %s/%s: %w", tenant, name, err)
	}
	return nil
}

func (c *client) getTenant(ctx context.Context, name string) (*slessclient.Tenant, error) {
	what := "read tenant " + name
	r, err := slessclient.Do(c.api.GetTenantWithResponse(ctx, name))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return object(what, r.StatusCode(), r.JSON200)
}

func (c *client) createTenant(ctx context.Context, in slessclient.TenantInput) (*slessclient.Tenant, error) {
	what := "create tenant " + in.Name
	r, err := slessclient.Do(c.api.CreateTenantWithResponse(ctx, in))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return object(what, r.StatusCode(), r.JSON201, r.JSON202)
}

func (c *client) deleteTenant(ctx context.Context, name string) error {
	if _, err := slessclient.Do(c.api.DeleteTenantWithResponse(ctx, name)); err != nil {
		return fmt.Errorf("delete tenant %s: %w", name, err)
	}
	return nil
}

func (c *client) createToken(ctx context.Context, tenant, name string) (*slessclient.TokenOutBody, error) {
	what := "issue a token of tenant " + tenant
	r, err := slessclient.Do(c.api.CreateTokenWithResponse(ctx, tenant, slessclient.CreateTokenJSONRequestBody{Name: &name}))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return object(what, r.StatusCode(), r.JSON201)
}

func (c *client) revokeToken(ctx context.Context, tenant, id string) error {
	if _, err := slessclient.Do(c.api.RevokeTokenWithResponse(ctx, tenant, id)); err != nil {
		return fmt.Errorf("revoke token %s of tenant %s: %w", id, tenant, err)
	}
	return nil
}

// waitGone polls get until it answers 404.
func waitGone(ctx context.Context, what string, get func(context.Context) error) error {
	var last error
	for {
		err := get(ctx)
		if isNotFound(err) {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			if last == nil {
				return fmt.Errorf("%s still exists: %w", what, ctx.Err())
			}
			return fmt.Errorf("%s: waiting until it is gone: %w (last answer: %v)", what, ctx.Err(), last)
		case <-time.After(time.Second):
		}
	}
}

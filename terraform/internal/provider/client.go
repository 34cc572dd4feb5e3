package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"time"

	"github.com/hashicorp/terraform-plugin-log/tflog"

	slessclient "github.com/kube5s/sless/pkg/client"
)

// The REST objects the provider reads and writes, as the gateway's API
// serves them (snake_case JSON, ARCHITECTURE.md §5).

type secretRef struct {
	Secret string `json:"secret"`
	Key    string `json:"key"`
}

type functionSpec struct {
	Runtime           string               `json:"runtime"`
	Entrypoint        string               `json:"entrypoint"`
	MemoryMB          *int32               `json:"memory_mb,omitempty"`
	CPUMillis         *int32               `json:"cpu_millis,omitempty"`
	TimeoutSec        *int32               `json:"timeout_sec,omitempty"`
	Concurrency       *int32               `json:"concurrency,omitempty"`
	MinReplicas       *int32               `json:"min_replicas,omitempty"`
	MaxReplicas       *int32               `json:"max_replicas,omitempty"`
	EnvVars           map[string]string    `json:"env_vars,omitempty"`
	SecretEnvVars     map[string]secretRef `json:"secret_env_vars,omitempty"`
	AllowSourceBuilds bool                 `json:"allow_source_builds,omitempty"`
}

type apiFunction struct {
	Name string `json:"name"`
	functionSpec
	Source *struct {
		SHA256 string `json:"sha256"`
	} `json:"source,omitempty"`
	Status struct {
		Phase             string `json:"phase"`
		Message           string `json:"message"`
		URL               string `json:"url"`
		Ready             bool   `json:"ready"`
		BuiltSourceSHA256 string `json:"built_source_sha256"`
		LastBuildID       string `json:"last_build_id"`
		LatestVersion     int64  `json:"latest_version"`
	} `json:"status"`
}

type apiBuild struct {
	ID           string `json:"id"`
	SourceSHA256 string `json:"source_sha256"`
	State        string `json:"state"`
	Reason       string `json:"reason"`
	Message      string `json:"message"`
}

type httpTrigger struct {
	Path    string   `json:"path"`
	Methods []string `json:"methods,omitempty"`
	Auth    string   `json:"auth,omitempty"`
}

type cronTrigger struct {
	Schedule                string          `json:"schedule"`
	TimeZone                string          `json:"time_zone,omitempty"`
	ConcurrencyPolicy       string          `json:"concurrency_policy,omitempty"`
	StartingDeadlineSeconds *int64          `json:"starting_deadline_seconds,omitempty"`
	Payload                 json.RawMessage `json:"payload,omitempty"`
}

type queueTrigger struct {
	Queue           string     `json:"queue"`
	Exchange        string     `json:"exchange,omitempty"`
	RoutingKey      string     `json:"routing_key,omitempty"`
	BrokerSecret    *secretRef `json:"broker_secret,omitempty"`
	Concurrency     *int32     `json:"concurrency,omitempty"`
	MaxRetries      *int32     `json:"max_retries,omitempty"`
	BackoffInitial  *int32     `json:"backoff_initial_seconds,omitempty"`
	BackoffMax      *int32     `json:"backoff_max_seconds,omitempty"`
	DeadLetterQueue string     `json:"dead_letter_queue,omitempty"`
}

type triggerSpec struct {
	Function string        `json:"function"`
	Type     string        `json:"type"`
	Enabled  *bool         `json:"enabled,omitempty"`
	HTTP     *httpTrigger  `json:"http,omitempty"`
	Cron     *cronTrigger  `json:"cron,omitempty"`
	Queue    *queueTrigger `json:"queue,omitempty"`
}

type apiTrigger struct {
	Name string `json:"name"`
	triggerSpec
	Status struct {
		Phase   string `json:"phase"`
		Message string `json:"message"`
		URL     string `json:"url"`
	} `json:"status"`
}

type jobSpec struct {
	Function   string          `json:"function"`
	RunID      *int64          `json:"run_id,omitempty"`
	Payload    json.RawMessage `json:"payload,omitempty"`
	TimeoutSec *int32          `json:"timeout_sec,omitempty"`
	MaxRetries *int32          `json:"max_retries,omitempty"`
}

type apiJob struct {
	Name string `json:"name"`
	jobSpec
	Status struct {
		Phase        string `json:"phase"`
		Message      string `json:"message"`
		LastRunID    int64  `json:"last_run_id"`
		InvocationID string `json:"invocation_id"`
		Result       string `json:"result"`
	} `json:"status"`
}

type tenantQuotas struct {
	MaxFunctions             *int32 `json:"max_functions,omitempty"`
	MaxPods                  *int32 `json:"max_pods,omitempty"`
	CPUMillis                *int32 `json:"cpu_millis,omitempty"`
	MemoryMB                 *int32 `json:"memory_mb,omitempty"`
	InvocationsPerSecond     *int32 `json:"invocations_per_second,omitempty"`
	ConcurrentBuilds         *int32 `json:"concurrent_builds,omitempty"`
	MaxConcurrentInvocations *int32 `json:"max_concurrent_invocations,omitempty"`
}

type tenantInput struct {
	Name        string        `json:"name"`
	DisplayName string        `json:"display_name,omitempty"`
	Quotas      *tenantQuotas `json:"quotas,omitempty"`
	Network     *struct {
		InternetEgress    *bool    `json:"internet_egress,omitempty"`
		DeniedEgressCIDRs []string `json:"denied_egress_cidrs,omitempty"`
	} `json:"network,omitempty"`
}

type apiTenant struct {
	Name        string       `json:"name"`
	DisplayName string       `json:"display_name"`
	Quotas      tenantQuotas `json:"quotas"`
	Network     struct {
		InternetEgress    *bool    `json:"internet_egress"`
		DeniedEgressCIDRs []string `json:"denied_egress_cidrs"`
	} `json:"network"`
	Status struct {
		Phase     string `json:"phase"`
		Message   string `json:"message"`
		Namespace string `json:"namespace"`
	} `json:"status"`
}

type apiToken struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	Name   string `json:"name"`
	Token  string `json:"token"`
}

// client calls the gateway through the typed client generated from its
// OpenAPI document (pkg/client). Answers are decoded into the provider's
// own views above, which carry only what the provider reads.
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

// answer is what every generated response has.
type answer interface {
	StatusCode() int
}

// call checks a generated call (its transport error, or the problem the
// API answered) and decodes the answer's body into out.
func call[R interface {
	*T
	answer
}, T any](what string, r R, err error, out any) error {
	r, err = slessclient.Do(r, err)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if out == nil {
		return nil
	}
	body := reflect.ValueOf(r).Elem().FieldByName("Body").Bytes()
	if s, ok := out.(*string); ok {
		*s = string(body)
		return nil
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("%s: decode the answer: %w", what, err)
	}
	return nil
}

const jsonType = "application/json"

func body(v any) (io.Reader, error) {
	b, err := json.Marshal(v)
	return bytes.NewReader(b), err
}

// ---------------------------------------------------------------- calls

func (c *client) getFunction(ctx context.Context, tenant, name string) (*apiFunction, error) {
	var f apiFunction
	r, err := c.api.GetFunctionWithResponse(ctx, tenant, name, &slessclient.GetFunctionParams{})
	return result(&f, call("read function "+tenant+"/"+name, r, err, &f))
}

// waitFunction answers once the source sum serves, or cannot (its build
// failed, it failed to run, another source replaced it), or after wait:
// the gateway's wait=ready watch judges, and outcome is its X-Sless-Wait
// (ready, failed or timeout).
func (c *client) waitFunction(ctx context.Context, tenant, name, sum string, wait time.Duration) (f *apiFunction, outcome string, err error) {
	f = &apiFunction{}
	ready, timeout := slessclient.GetFunctionParamsWaitReady, wait.String()
	r, err := c.api.GetFunctionWithResponse(ctx, tenant, name, &slessclient.GetFunctionParams{Wait: &ready, Timeout: &timeout, SourceSha256: &sum})
	if err := call("wait for function "+tenant+"/"+name, r, err, f); err != nil {
		return nil, "", err
	}
	return f, r.HTTPResponse.Header.Get("X-Sless-Wait"), nil
}

func (c *client) createFunction(ctx context.Context, tenant, name string, spec functionSpec) (*apiFunction, error) {
	b, err := body(struct {
		Name string `json:"name"`
		functionSpec
	}{name, spec})
	if err != nil {
		return nil, err
	}
	var f apiFunction
	r, err := c.api.CreateFunctionWithBodyWithResponse(ctx, tenant, jsonType, b)
	return result(&f, call("create function "+tenant+"/"+name, r, err, &f))
}

func (c *client) replaceFunction(ctx context.Context, tenant, name string, spec functionSpec) (*apiFunction, error) {
	raw, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	// PUT needs env_vars even when empty; omitempty drops it.
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	if spec.EnvVars == nil {
		spec.EnvVars = map[string]string{}
	}
	m["env_vars"] = spec.EnvVars
	b, err := body(m)
	if err != nil {
		return nil, err
	}
	var f apiFunction
	r, err := c.api.ReplaceFunctionWithBodyWithResponse(ctx, tenant, name, jsonType, b)
	return result(&f, call("replace function "+tenant+"/"+name, r, err, &f))
}

func (c *client) deleteFunction(ctx context.Context, tenant, name string) error {
	r, err := c.api.DeleteFunctionWithResponse(ctx, tenant, name)
	return call("delete function "+tenant+"/"+name, r, err, nil)
}

func (c *client) uploadSource(ctx context.Context, tenant, name string, zip []byte) error {
	_, err := slessclient.UploadZip(ctx, c.api, tenant, name, zip)
	if err != nil {
		return fmt.Errorf("upload the source of %s/%s: %w", tenant, name, err)
	}
	return nil
}

func (c *client) getBuild(ctx context.Context, tenant, name, id string) (*apiBuild, error) {
	var b apiBuild
	r, err := c.api.GetBuildWithResponse(ctx, tenant, name, id)
	return result(&b, call("read build "+id, r, err, &b))
}

func (c *client) buildLog(ctx context.Context, tenant, name, id string) (string, error) {
	var s string
	r, err := c.api.GetBuildLogWithResponse(ctx, tenant, name, id, &slessclient.GetBuildLogParams{})
	return s, call("read the log of build "+id, r, err, &s)
}

func (c *client) getTrigger(ctx context.Context, tenant, name string) (*apiTrigger, error) {
	var t apiTrigger
	r, err := c.api.GetTriggerWithResponse(ctx, tenant, name)
	return result(&t, call("read trigger "+tenant+"/"+name, r, err, &t))
}

func (c *client) putTrigger(ctx context.Context, tenant, name string, spec triggerSpec) (*apiTrigger, error) {
	b, err := body(spec)
	if err != nil {
		return nil, err
	}
	var t apiTrigger
	r, err := c.api.ReplaceTriggerWithBodyWithResponse(ctx, tenant, name, jsonType, b)
	return result(&t, call("replace trigger "+tenant+"/"+name, r, err, &t))
}

func (c *client) createTrigger(ctx context.Context, tenant, name string, spec triggerSpec) (*apiTrigger, error) {
	b, err := body(struct {
		Name string `json:"name"`
		triggerSpec
	}{name, spec})
	if err != nil {
		return nil, err
	}
	var t apiTrigger
	r, err := c.api.CreateTriggerWithBodyWithResponse(ctx, tenant, jsonType, b)
	return result(&t, call("create trigger "+tenant+"/"+name, r, err, &t))
}

func (c *client) deleteTrigger(ctx context.Context, tenant, name string) error {
	r, err := c.api.DeleteTriggerWithResponse(ctx, tenant, name)
	return call("delete trigger "+tenant+"/"+name, r, err, nil)
}

func (c *client) getJob(ctx context.Context, tenant, name string) (*apiJob, error) {
	var j apiJob
	r, err := c.api.GetJobWithResponse(ctx, tenant, name)
	return result(&j, call("read job "+tenant+"/"+name, r, err, &j))
}

func (c *client) createJob(ctx context.Context, tenant, name string, spec jobSpec) (*apiJob, error) {
	b, err := body(struct {
		Name string `json:"name"`
		jobSpec
	}{name, spec})
	if err != nil {
		return nil, err
	}
	var j apiJob
	r, err := c.api.CreateJobWithBodyWithResponse(ctx, tenant, jsonType, b)
	return result(&j, call("create job "+tenant+"/"+name, r, err, &j))
}

func (c *client) putJob(ctx context.Context, tenant, name string, spec jobSpec) (*apiJob, error) {
	b, err := body(spec)
	if err != nil {
		return nil, err
	}
	var j apiJob
	r, err := c.api.ReplaceJobWithBodyWithResponse(ctx, tenant, name, jsonType, b)
	return result(&j, call("replace job "+tenant+"/"+name, r, err, &j))
}

func (c *client) deleteJob(ctx context.Context, tenant, name string) error {
	r, err := c.api.DeleteJobWithResponse(ctx, tenant, name)
	return call("delete job "+tenant+"/"+name, r, err, nil)
}

func (c *client) getTenant(ctx context.Context, name string) (*apiTenant, error) {
	var t apiTenant
	r, err := c.api.GetTenantWithResponse(ctx, name)
	return result(&t, call("read tenant "+name, r, err, &t))
}

func (c *client) createTenant(ctx context.Context, in tenantInput) (*apiTenant, error) {
	b, err := body(in)
	if err != nil {
		return nil, err
	}
	var t apiTenant
	r, err := c.api.CreateTenantWithBodyWithResponse(ctx, jsonType, b)
	return result(&t, call("create tenant "+in.Name, r, err, &t))
}

func (c *client) deleteTenant(ctx context.Context, name string) error {
	r, err := c.api.DeleteTenantWithResponse(ctx, name)
	return call("delete tenant "+name, r, err, nil)
}

func (c *client) createToken(ctx context.Context, tenant, name string) (*apiToken, error) {
	var t apiToken
	r, err := c.api.CreateTokenWithResponse(ctx, tenant, slessclient.CreateTokenJSONRequestBody{Name: &name})
	return result(&t, call("issue a token of tenant "+tenant, r, err, &t))
}

func (c *client) revokeToken(ctx context.Context, tenant, id string) error {
	r, err := c.api.RevokeTokenWithResponse(ctx, tenant, id)
	return call("revoke token "+id+" of tenant "+tenant, r, err, nil)
}

// waitGone polls get until it answers 404.
// result is v, or nil when err: a half-decoded answer must not pass for
// the object (a failed wait once left the function's name empty in the
// state, so that destroy deleted nothing).
func result[T any](v *T, err error) (*T, error) {
	if err != nil {
		return nil, err
	}
	return v, nil
}

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

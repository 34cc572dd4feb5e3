package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
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

// apiError is a response the gateway refused: its status and the problem's
// detail (RFC 9457).
type apiError struct {
	Status int
	Title  string
	Detail string
	Errors []struct {
		Location string `json:"location"`
		Message  string `json:"message"`
	}
}

func (e *apiError) Error() string {
	msg := fmt.Sprintf("%d %s", e.Status, e.Title)
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	for _, fe := range e.Errors {
		msg += fmt.Sprintf("; %s: %s", fe.Location, fe.Message)
	}
	return msg
}

func isNotFound(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.Status == http.StatusNotFound
}

// client talks to the gateway with one token.
type client struct {
	base  string
	token string
	http  *http.Client
}

func (c *client) do(ctx context.Context, method, path, contentType string, body io.Reader, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", "application/json, application/problem+json")
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode >= 300 {
		ae := &apiError{Status: resp.StatusCode, Title: http.StatusText(resp.StatusCode)}
		var p struct {
			Title  string `json:"title"`
			Detail string `json:"detail"`
			Errors []struct {
				Location string `json:"location"`
				Message  string `json:"message"`
			} `json:"errors"`
		}
		if json.Unmarshal(raw, &p) == nil {
			if p.Title != "" {
				ae.Title = p.Title
			}
			ae.Detail, ae.Errors = p.Detail, p.Errors
		} else {
			ae.Detail = strings.TrimSpace(string(raw))
		}
		return fmt.Errorf("%s %s: %w", method, path, ae)
	}
	if out == nil {
		return nil
	}
	if s, ok := out.(*string); ok {
		*s = string(raw)
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s %s: decode the answer: %w", method, path, err)
	}
	return nil
}

func (c *client) json(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	ct := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body, ct = bytes.NewReader(b), "application/json"
	}
	return c.do(ctx, method, path, ct, body, out)
}

func tenantPath(tenant string, parts ...string) string {
	p := "/v1/tenants/" + url.PathEscape(tenant)
	for _, s := range parts {
		p += "/" + url.PathEscape(s)
	}
	return p
}

// ---------------------------------------------------------------- calls

func (c *client) getFunction(ctx context.Context, tenant, name string) (*apiFunction, error) {
	var f apiFunction
	return &f, c.json(ctx, http.MethodGet, tenantPath(tenant, "functions", name), nil, &f)
}

func (c *client) createFunction(ctx context.Context, tenant, name string, spec functionSpec) (*apiFunction, error) {
	in := struct {
		Name string `json:"name"`
		functionSpec
	}{name, spec}
	var f apiFunction
	return &f, c.json(ctx, http.MethodPost, tenantPath(tenant, "functions"), in, &f)
}

func (c *client) replaceFunction(ctx context.Context, tenant, name string, spec functionSpec) (*apiFunction, error) {
	if spec.EnvVars == nil {
		spec.EnvVars = map[string]string{} // PUT needs it, even empty
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	// env_vars must be present on PUT even when empty; omitempty drops it.
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	m["env_vars"] = spec.EnvVars
	var f apiFunction
	return &f, c.json(ctx, http.MethodPut, tenantPath(tenant, "functions", name), m, &f)
}

func (c *client) deleteFunction(ctx context.Context, tenant, name string) error {
	return c.json(ctx, http.MethodDelete, tenantPath(tenant, "functions", name), nil, nil)
}

func (c *client) uploadSource(ctx context.Context, tenant, name string, zip []byte) (string, error) {
	var out struct {
		SHA256 string `json:"sha256"`
	}
	err := c.do(ctx, http.MethodPut, tenantPath(tenant, "functions", name, "source"), "application/zip", bytes.NewReader(zip), &out)
	return out.SHA256, err
}

func (c *client) getBuild(ctx context.Context, tenant, name, id string) (*apiBuild, error) {
	var b apiBuild
	return &b, c.json(ctx, http.MethodGet, tenantPath(tenant, "functions", name, "builds", id), nil, &b)
}

func (c *client) buildLog(ctx context.Context, tenant, name, id string) (string, error) {
	var s string
	return s, c.do(ctx, http.MethodGet, tenantPath(tenant, "functions", name, "builds", id, "log"), "", nil, &s)
}

func (c *client) getTrigger(ctx context.Context, tenant, name string) (*apiTrigger, error) {
	var t apiTrigger
	return &t, c.json(ctx, http.MethodGet, tenantPath(tenant, "triggers", name), nil, &t)
}

func (c *client) putTrigger(ctx context.Context, tenant, name string, spec triggerSpec) (*apiTrigger, error) {
	var t apiTrigger
	return &t, c.json(ctx, http.MethodPut, tenantPath(tenant, "triggers", name), spec, &t)
}

func (c *client) createTrigger(ctx context.Context, tenant, name string, spec triggerSpec) (*apiTrigger, error) {
	in := struct {
		Name string `json:"name"`
		triggerSpec
	}{name, spec}
	var t apiTrigger
	return &t, c.json(ctx, http.MethodPost, tenantPath(tenant, "triggers"), in, &t)
}

func (c *client) deleteTrigger(ctx context.Context, tenant, name string) error {
	return c.json(ctx, http.MethodDelete, tenantPath(tenant, "triggers", name), nil, nil)
}

func (c *client) getJob(ctx context.Context, tenant, name string) (*apiJob, error) {
	var j apiJob
	return &j, c.json(ctx, http.MethodGet, tenantPath(tenant, "jobs", name), nil, &j)
}

func (c *client) createJob(ctx context.Context, tenant, name string, spec jobSpec) (*apiJob, error) {
	in := struct {
		Name string `json:"name"`
		jobSpec
	}{name, spec}
	var j apiJob
	return &j, c.json(ctx, http.MethodPost, tenantPath(tenant, "jobs"), in, &j)
}

func (c *client) putJob(ctx context.Context, tenant, name string, spec jobSpec) (*apiJob, error) {
	var j apiJob
	return &j, c.json(ctx, http.MethodPut, tenantPath(tenant, "jobs", name), spec, &j)
}

func (c *client) deleteJob(ctx context.Context, tenant, name string) error {
	return c.json(ctx, http.MethodDelete, tenantPath(tenant, "jobs", name), nil, nil)
}

func (c *client) getTenant(ctx context.Context, name string) (*apiTenant, error) {
	var t apiTenant
	return &t, c.json(ctx, http.MethodGet, tenantPath(name), nil, &t)
}

func (c *client) createTenant(ctx context.Context, in tenantInput) (*apiTenant, error) {
	var t apiTenant
	return &t, c.json(ctx, http.MethodPost, "/v1/tenants", in, &t)
}

func (c *client) deleteTenant(ctx context.Context, name string) error {
	return c.json(ctx, http.MethodDelete, tenantPath(name), nil, nil)
}

func (c *client) createToken(ctx context.Context, tenant, name string) (*apiToken, error) {
	var t apiToken
	return &t, c.json(ctx, http.MethodPost, tenantPath(tenant, "tokens"), map[string]string{"name": name}, &t)
}

func (c *client) revokeToken(ctx context.Context, tenant, id string) error {
	return c.json(ctx, http.MethodDelete, tenantPath(tenant, "tokens", id), nil, nil)
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

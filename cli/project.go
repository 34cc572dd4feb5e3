package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/kube5s/sless/pkg/client"
)

// projectFile is the name of a function directory's settings file.
const projectFile = "sless.yaml"

// project is sless.yaml: the function's settings as the API names them
// (runtime, entrypoint, memory_mb, ...), the files left out of the upload,
// and the function's triggers. Triggers name their function only when it
// is another one.
type project struct {
	Name string `json:"name"`
	settings
	Exclude  []string              `json:"exclude,omitempty"`
	Triggers []client.TriggerInput `json:"triggers,omitempty"`
}

// settings are the function's fields a developer sets, as the API names them.
type settings struct {
	Runtime           string                       `json:"runtime"`
	Entrypoint        string                       `json:"entrypoint"`
	Image             *string                      `json:"image,omitempty"`
	MemoryMb          *int32                       `json:"memory_mb,omitempty"`
	CpuMillis         *int32                       `json:"cpu_millis,omitempty"`
	TimeoutSec        *int32                       `json:"timeout_sec,omitempty"`
	Concurrency       *int32                       `json:"concurrency,omitempty"`
	MinReplicas       *int32                       `json:"min_replicas,omitempty"`
	MaxReplicas       *int32                       `json:"max_replicas,omitempty"`
	TargetConcurrency *int32                       `json:"target_concurrency,omitempty"`
	ScaleDownDelay    *int32                       `json:"scale_down_delay_seconds,omitempty"`
	MaxBuffered       *int32                       `json:"max_buffered_requests,omitempty"`
	ScalingSchedules  *[]client.ScalingSchedule    `json:"scaling_schedules,omitempty"`
	EnvVars           *map[string]string           `json:"env_vars,omitempty"`
	SecretEnvVars     *map[string]client.SecretRef `json:"secret_env_vars,omitempty"`
	AllowSourceBuilds *bool                        `json:"allow_source_builds,omitempty"`
}

var nameRE = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)

// loadProject reads dir/sless.yaml; unknown keys are errors (a typo must
// not be ignored silently).
func loadProject(dir string) (*project, error) {
	path := filepath.Join(dir, projectFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, usagef("%s has no %s: run 'sless init' to make one", dir, projectFile)
	}
	if err != nil {
		return nil, err
	}
	var p project
	if err := yaml.UnmarshalStrict(b, &p); err != nil {
		return nil, usagef("%s: %v", path, err)
	}
	if !nameRE.MatchString(p.Name) || len(p.Name) > 53 {
		return nil, usagef("%s: name %q: lowercase letters, digits and '-', starting with a letter, at most 53", path, p.Name)
	}
	if p.Runtime == "" || p.Entrypoint == "" {
		return nil, usagef("%s: runtime and entrypoint are required", path)
	}
	seen := map[string]bool{}
	for i := range p.Triggers {
		tr := &p.Triggers[i]
		if tr.Function == "" {
			tr.Function = p.Name
		}
		if tr.Name == "" || seen[tr.Name] {
			return nil, usagef("%s: trigger %d: every trigger needs a name of its own", path, i+1)
		}
		seen[tr.Name] = true
	}
	return &p, nil
}

// specOf is the spec part of a function as the API shows it.
func specOf(f *client.Function) client.FunctionReplacement {
	return client.FunctionReplacement{Runtime: client.FunctionReplacementRuntime(f.Runtime), Entrypoint: f.Entrypoint, Image: f.Image,
		MemoryMb: f.MemoryMb, CpuMillis: f.CpuMillis, TimeoutSec: f.TimeoutSec, Concurrency: f.Concurrency,
		MinReplicas: f.MinReplicas, MaxReplicas: f.MaxReplicas, TargetConcurrency: f.TargetConcurrency,
		ScaleDownDelaySeconds: f.ScaleDownDelaySeconds, MaxBufferedRequests: f.MaxBufferedRequests, ScalingSchedules: f.ScalingSchedules,
		EnvVars: f.EnvVars, SecretEnvVars: f.SecretEnvVars, AllowSourceBuilds: f.AllowSourceBuilds}
}

// desiredSpec is the full spec a PUT sends: sless.yaml's settings, and for
// the ones it leaves out the function's current values (so a deploy does
// not reset what sless.yaml never mentioned). Environment variables are
// sless.yaml's only: one removed from the file is removed.
func desiredSpec(cur *client.Function, p *project) client.FunctionReplacement {
	s := p.settings
	d := client.FunctionReplacement{Runtime: client.FunctionReplacementRuntime(s.Runtime), Entrypoint: s.Entrypoint, Image: s.Image,
		MemoryMb: s.MemoryMb, CpuMillis: s.CpuMillis, TimeoutSec: s.TimeoutSec, Concurrency: s.Concurrency,
		MinReplicas: s.MinReplicas, MaxReplicas: s.MaxReplicas, TargetConcurrency: s.TargetConcurrency,
		ScaleDownDelaySeconds: s.ScaleDownDelay, MaxBufferedRequests: s.MaxBuffered, ScalingSchedules: s.ScalingSchedules,
		EnvVars: s.EnvVars, SecretEnvVars: s.SecretEnvVars, AllowSourceBuilds: s.AllowSourceBuilds}
	if cur != nil {
		c := specOf(cur)
		for _, f := range []struct{ dst, src **int32 }{{&d.MemoryMb, &c.MemoryMb}, {&d.CpuMillis, &c.CpuMillis}, {&d.TimeoutSec, &c.TimeoutSec},
			{&d.Concurrency, &c.Concurrency}, {&d.MinReplicas, &c.MinReplicas}, {&d.MaxReplicas, &c.MaxReplicas},
			{&d.TargetConcurrency, &c.TargetConcurrency}, {&d.ScaleDownDelaySeconds, &c.ScaleDownDelaySeconds},
			{&d.MaxBufferedRequests, &c.MaxBufferedRequests}} {
			if *f.dst == nil {
				*f.dst = *f.src
			}
		}
		if d.ScalingSchedules == nil {
			d.ScalingSchedules = c.ScalingSchedules
		}
	}
	if d.EnvVars == nil {
		d.EnvVars = &map[string]string{}
	}
	if d.AllowSourceBuilds == nil {
		d.AllowSourceBuilds = ptr(false)
	}
	return d
}

// sameSpec compares two specs as the API would store them.
func sameSpec(a, b client.FunctionReplacement) bool {
	norm := func(s client.FunctionReplacement) []byte {
		if s.EnvVars == nil || len(*s.EnvVars) == 0 {
			s.EnvVars = nil
		}
		if s.SecretEnvVars != nil && len(*s.SecretEnvVars) == 0 {
			s.SecretEnvVars = nil
		}
		if s.AllowSourceBuilds != nil && !*s.AllowSourceBuilds {
			s.AllowSourceBuilds = nil
		}
		if s.Image != nil && *s.Image == "" {
			s.Image = nil
		}
		b, _ := json.Marshal(s)
		return b
	}
	return bytes.Equal(norm(a), norm(b))
}

// templates are what 'sless init' writes, by runtime.
var templates = map[client.FunctionInputRuntime]struct {
	entrypoint, file, code string
}{
	client.FunctionInputRuntimePython311: {"main.handler", "main.py", `"""%[1]s: a sless function. 'sless deploy' puts it on the platform."""


def handler(event, context):
    body = event.get("json")  # the body parsed, when it is JSON
    name = body.get("name") if isinstance(body, dict) else None
    name = name or event["query"].get("name") or "world"
    print(f"greeting {name}")
    return {"message": f"Hello, {name}!"}
`},
	client.FunctionInputRuntimeNodejs20: {"index.handler", "index.js", `// %[1]s: a sless function. 'sless deploy' puts it on the platform.
exports.handler = async (event) => {
  const body = event.json && typeof event.json === 'object' ? event.json : {}; // the body parsed, when it is JSON
  const name = body.name || event.query.name || 'world';
  console.log(` + "`greeting ${name}`" + `);
  return { message: ` + "`Hello, ${name}!`" + ` };
};
`},
}

const projectTemplate = `# sless.yaml: the function %[1]s as code; 'sless deploy' applies it.
# The settings are the API's (docs/getting-started.md lists them).
name: %[1]s
runtime: %[2]s
entrypoint: %[3]s
memory_mb: 128
cpu_millis: 100
timeout_sec: 30
concurrency: 4
# Scaling (min_replicas, max_replicas, target_concurrency,
# scale_down_delay_seconds, max_buffered_requests): left out, the
# platform's defaults apply. Floors for business hours:
# scaling_schedules: [{cron: "0 9 * * 1-5", time_zone: Europe/Berlin,
#   duration_seconds: 32400, min_replicas: 2}]
env_vars: {}
# Left out of the upload besides sless.yaml, .git and caches (path patterns).
exclude: ["*.md"]
# The function's triggers: http (path, auth token|none), cron (schedule,
# payload, pre_warm_seconds: auto or seconds of a ready replica before each
# fire) or queue (queue, concurrency, max_retries). A trigger of this
# function that is not listed here is deleted by deploy.
triggers:
  - name: %[1]s
    type: http
    http:
      path: /%[1]s
      auth: token
`

// runtimeNames are the runtimes 'sless init' offers: the API's.
func runtimeNames() []string {
	var names []string
	for _, r := range client.Runtimes() {
		names = append(names, string(r))
	}
	return names
}

func writeProject(dir, name, runtime string) ([]string, error) {
	tpl, ok := templates[client.FunctionInputRuntime(runtime)]
	if !ok {
		return nil, usagef("--runtime %q: %s", runtime, strings.Join(runtimeNames(), " or "))
	}
	if !nameRE.MatchString(name) || len(name) > 53 {
		return nil, usagef("name %q: lowercase letters, digits and '-', starting with a letter, at most 53", name)
	}
	if _, err := os.Stat(filepath.Join(dir, projectFile)); err == nil {
		return nil, fmt.Errorf("%s already has a %s", dir, projectFile)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	files := map[string]string{
		projectFile: fmt.Sprintf(projectTemplate, name, runtime, tpl.entrypoint),
		tpl.file:    fmt.Sprintf(tpl.code, name),
	}
	var written []string
	for _, f := range []string{projectFile, tpl.file} {
		path := filepath.Join(dir, f)
		fh, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return written, err
		}
		_, err = fh.WriteString(files[f])
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return written, err
		}
		written = append(written, path)
	}
	return written, nil
}

package api

import (
	"encoding/json"
	"sort"
	"time"

	"github.com/danielgtaylor/huma/v2"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
)

// The REST representations (snake_case) and their mapping to the custom
// resources. Optional inputs are pointers: absent means "the default",
// on create and on a full replacement (PUT) alike; the defaults are the
// custom resources' (their +kubebuilder:default markers), applied by the
// API server.

// Condition is a status condition.
type Condition struct {
	Type               string    `json:"type"`
	Status             string    `json:"status"`
	Reason             string    `json:"reason,omitempty"`
	Message            string    `json:"message,omitempty"`
	LastTransitionTime time.Time `json:"last_transition_time"`
}

func conditions(cs []metav1.Condition) []Condition {
	out := make([]Condition, 0, len(cs))
	for _, c := range cs {
		out = append(out, Condition{Type: c.Type, Status: string(c.Status), Reason: c.Reason, Message: c.Message, LastTransitionTime: c.LastTransitionTime.Time})
	}
	return out
}

// ---------------------------------------------------------------- tenants

// TenantQuotas are a tenant's limits.
type TenantQuotas struct {
	MaxFunctions         *int32 `json:"max_functions,omitempty" minimum:"0" maximum:"10000"`
	MaxPods              *int32 `json:"max_pods,omitempty" minimum:"0" maximum:"100000"`
	CPUMillis            *int32 `json:"cpu_millis,omitempty" minimum:"0"`
	MemoryMB             *int32 `json:"memory_mb,omitempty" minimum:"0"`
	InvocationsPerSecond *int32 `json:"invocations_per_second,omitempty" minimum:"1"`
	ConcurrentBuilds     *int32 `json:"concurrent_builds,omitempty" minimum:"1" maximum:"100"`
	// 0 takes the invoker's default (a fraction of a replica's slots).
	MaxConcurrentInvocations *int32 `json:"max_concurrent_invocations,omitempty" minimum:"0" maximum:"4096"`
}

// TenantNetwork is a tenant's egress policy.
type TenantNetwork struct {
	InternetEgress    *bool    `json:"internet_egress,omitempty"`
	DeniedEgressCIDRs []string `json:"denied_egress_cidrs,omitempty" maxItems:"64"`
}

// TenantInput creates a tenant.
type TenantInput struct {
	Name        string         `json:"name" pattern:"^[a-z]([-a-z0-9]*[a-z0-9])?$" maxLength:"54" doc:"DNS-1123 label; the namespace is sless-fn-<name>"`
	DisplayName string         `json:"display_name,omitempty" maxLength:"128"`
	Quotas      *TenantQuotas  `json:"quotas,omitempty"`
	Network     *TenantNetwork `json:"network,omitempty"`
}

// Tenant is a tenant as the API shows it.
type Tenant struct {
	Name        string        `json:"name"`
	DisplayName string        `json:"display_name,omitempty"`
	Quotas      TenantQuotas  `json:"quotas"`
	Network     TenantNetwork `json:"network"`
	Status      TenantStatus  `json:"status"`
	CreatedAt   time.Time     `json:"created_at"`
}

// TenantStatus is read-only.
type TenantStatus struct {
	Phase      string      `json:"phase,omitempty"`
	Message    string      `json:"message,omitempty"`
	Namespace  string      `json:"namespace,omitempty"`
	Conditions []Condition `json:"conditions"`
}

func tenantCR(in *TenantInput) *slessv1.Tenant {
	t := &slessv1.Tenant{ObjectMeta: metav1.ObjectMeta{Name: in.Name}, Spec: slessv1.TenantSpec{DisplayName: in.DisplayName}}
	if q := in.Quotas; q != nil {
		set(&t.Spec.Quotas.MaxFunctions, q.MaxFunctions)
		set(&t.Spec.Quotas.MaxPods, q.MaxPods)
		set(&t.Spec.Quotas.CPUMillis, q.CPUMillis)
		set(&t.Spec.Quotas.MemoryMB, q.MemoryMB)
		set(&t.Spec.Quotas.InvocationsPerSecond, q.InvocationsPerSecond)
		set(&t.Spec.Quotas.ConcurrentBuilds, q.ConcurrentBuilds)
		set(&t.Spec.Quotas.MaxConcurrentInvocations, q.MaxConcurrentInvocations)
	}
	if n := in.Network; n != nil {
		t.Spec.Network.InternetEgress = n.InternetEgress
		t.Spec.Network.DeniedEgressCIDRs = n.DeniedEgressCIDRs
	}
	return t
}

func tenantREST(t *slessv1.Tenant) Tenant {
	q := t.Spec.Quotas
	return Tenant{
		Name: t.Name, DisplayName: t.Spec.DisplayName, CreatedAt: t.CreationTimestamp.Time,
		Quotas: TenantQuotas{MaxFunctions: &q.MaxFunctions, MaxPods: &q.MaxPods, CPUMillis: &q.CPUMillis, MemoryMB: &q.MemoryMB,
			InvocationsPerSecond: &q.InvocationsPerSecond, ConcurrentBuilds: &q.ConcurrentBuilds, MaxConcurrentInvocations: &q.MaxConcurrentInvocations},
		Network: TenantNetwork{InternetEgress: t.Spec.Network.InternetEgress, DeniedEgressCIDRs: t.Spec.Network.DeniedEgressCIDRs},
		Status:  TenantStatus{Phase: string(t.Status.Phase), Message: t.Status.Message, Namespace: t.Status.Namespace, Conditions: conditions(t.Status.Conditions)},
	}
}

// -------------------------------------------------------------- functions

// SecretRef takes a value from a key of a Secret in the tenant namespace.
type SecretRef struct {
	Secret string `json:"secret" minLength:"1" maxLength:"253"`
	Key    string `json:"key" minLength:"1" maxLength:"253"`
}

// Runtime is a runtime's name. Its schema's enum is slessv1.Runtimes, so the
// API offers what the CRD accepts.
type Runtime string

// TransformSchema fills the enum from slessv1.Runtimes.
func (Runtime) TransformSchema(_ huma.Registry, s *huma.Schema) *huma.Schema {
	s.Enum = nil
	for _, r := range slessv1.Runtimes() {
		s.Enum = append(s.Enum, string(r)) // string: huma compares the decoded JSON value
	}
	return s
}

// FunctionSpec is what a developer sets on a function.
type FunctionSpec struct {
	Runtime           Runtime              `json:"runtime"`
	Entrypoint        string               `json:"entrypoint" minLength:"3" maxLength:"256" pattern:"^[A-Za-z0-9_][A-Za-z0-9_./-]*\\.[A-Za-z_$][A-Za-z0-9_$]*$" doc:"module.function (Python) or file.export (Node)"`
	Image             string               `json:"image,omitempty" maxLength:"512" pattern:"^[^\\s@]+@sha256:[a-f0-9]{64}$" doc:"a prebuilt image, pinned by digest"`
	MemoryMB          *int32               `json:"memory_mb,omitempty" minimum:"32" maximum:"8192"`
	CPUMillis         *int32               `json:"cpu_millis,omitempty" minimum:"10" maximum:"8000"`
	TimeoutSec        *int32               `json:"timeout_sec,omitempty" minimum:"1" maximum:"900"`
	Concurrency       *int32               `json:"concurrency,omitempty" minimum:"1" maximum:"1000"`
	MinReplicas       *int32               `json:"min_replicas,omitempty" minimum:"0" maximum:"100" doc:"0 lets an idle version go to zero; absent: the platform's default (1 unless configured otherwise)"`
	MaxReplicas       *int32               `json:"max_replicas,omitempty" minimum:"1" maximum:"100" doc:"absent: the platform's default (1 unless configured otherwise), at least min_replicas"`
	TargetConcurrency *int32               `json:"target_concurrency,omitempty" minimum:"0" maximum:"1000" doc:"calls in flight per replica the scaler plans for; absent or 0: the platform's share of concurrency (70 % unless configured otherwise)"`
	ScaleDownDelaySec *int32               `json:"scale_down_delay_seconds,omitempty" minimum:"0" maximum:"3600" doc:"how long lower demand lasts before replicas go down; absent or 0: the platform's default (120 unless configured otherwise)"`
	MaxBuffered       *int32               `json:"max_buffered_requests,omitempty" minimum:"0" maximum:"100000" doc:"calls a gateway holds for a version that wakes or is full; absent or 0: the platform's default (1000 unless configured otherwise)"`
	ScalingSchedules  []ScalingSchedule    `json:"scaling_schedules,omitempty" maxItems:"10" doc:"floors of replicas for a while from each start of a cron schedule (business hours); the highest that holds counts"`
	EnvVars           map[string]string    `json:"env_vars" required:"false" doc:"absent or empty: none; GET always shows it"`
	SecretEnvVars     map[string]SecretRef `json:"secret_env_vars,omitempty"`
	AllowSourceBuilds bool                 `json:"allow_source_builds,omitempty" doc:"let pip build source distributions; by default only wheels are installed"`
	Traffic           []TrafficTarget      `json:"traffic,omitempty" maxItems:"20" doc:"the split of untagged calls over versions, summing to 100; absent: kept as it is (default 100 % latest); PUT .../traffic sets it"`
	Versioning        *Versioning          `json:"versioning,omitempty" doc:"absent: kept as it is"`
}

// ScalingSchedule is a floor of min_replicas for duration_seconds from
// each start of cron, read in time_zone as a cron trigger's schedule is.
type ScalingSchedule struct {
	Cron            string `json:"cron" minLength:"1" maxLength:"128" doc:"five fields, or @daily, @every 1h ..., as a cron trigger's schedule"`
	TimeZone        string `json:"time_zone,omitempty" maxLength:"64" doc:"an IANA zone name; absent: UTC"`
	DurationSeconds int32  `json:"duration_seconds" minimum:"1" maximum:"604800" doc:"how long the floor holds from each start, elapsed time"`
	MinReplicas     int32  `json:"min_replicas" minimum:"1" maximum:"100" doc:"the floor while it holds"`
}

// TrafficTarget is one entry of a function's traffic: a version by
// number or latest, a share, and an optional tag (a stable route:
// invoke name@tag).
type TrafficTarget struct {
	Version *int32 `json:"version,omitempty" minimum:"1" doc:"a version number; or latest"`
	Latest  bool   `json:"latest,omitempty" doc:"the newest published version, whichever it is when a call comes"`
	Percent int32  `json:"percent" minimum:"0" maximum:"100"`
	Tag     string `json:"tag,omitempty" maxLength:"40" pattern:"^[a-z]([-a-z0-9]*[a-z0-9])?$"`
}

// Versioning keeps published versions.
type Versioning struct {
	Retain *int32 `json:"retain,omitempty" minimum:"1" maximum:"100" doc:"the newest versions kept (default 10), besides every version traffic, a tag or pinned work names"`
}

// ServingVersion is one version the data plane sends work to, with its
// effective share (status.serving).
type ServingVersion struct {
	Version  int32    `json:"version"`
	Percent  int32    `json:"percent"`
	Tags     []string `json:"tags,omitempty"`
	Ready    bool     `json:"ready"`
	Draining bool     `json:"draining,omitempty"`
	Idle     bool     `json:"idle,omitempty" doc:"at zero replicas or on the way there: a call waits while the version starts"`
	// The scaler's decision for the version and what it observed.
	DesiredReplicas int32  `json:"desired_replicas"`
	ReadyReplicas   int32  `json:"ready_replicas"`
	ScalingReason   string `json:"scaling_reason,omitempty" doc:"why the version has the replicas it has: Load, Panic, Backlog, ColdStartGuard, ScaleDownDelay, IdleWait, DrainingToZero, ScaledToZero, WakeLimited, MinReplicas, MaxReplicas, QuotaPods, ..."`
}

// FunctionInput creates a function.
type FunctionInput struct {
	Name string `json:"name" pattern:"^[a-z]([-a-z0-9]*[a-z0-9])?$" maxLength:"53" doc:"DNS-1123 label"`
	FunctionSpec
}

// Function is a function as the API shows it.
type Function struct {
	Name string `json:"name"`
	FunctionSpec
	Source    *FunctionSource `json:"source,omitempty"`
	Status    FunctionStatus  `json:"status"`
	CreatedAt time.Time       `json:"created_at"`
}

// FunctionReplacement is the body of a PUT: a function as GET returns it.
// name may be left out and must otherwise be the path's; source, status and
// created_at are read-only and ignored (status changes between a client's
// GET and its PUT; the source changes only by upload).
type FunctionReplacement struct {
	Name string `json:"name,omitempty" maxLength:"63" doc:"optional; must be the name in the path"`
	FunctionSpec
	Source    *FunctionSource `json:"source,omitempty" readOnly:"true" doc:"read-only, ignored: the source changes by upload"`
	Status    *FunctionStatus `json:"status,omitempty" readOnly:"true" doc:"read-only, ignored"`
	CreatedAt *time.Time      `json:"created_at,omitempty" readOnly:"true" doc:"read-only, ignored"`
}

func (r *FunctionReplacement) replacement() (string, *FunctionSpec) { return r.Name, &r.FunctionSpec }

// FunctionSource is the uploaded archive.
type FunctionSource struct {
	SHA256 string `json:"sha256"`
	S3Key  string `json:"s3_key"`
}

// FunctionStatus is read-only.
type FunctionStatus struct {
	Phase             string           `json:"phase,omitempty"`
	Message           string           `json:"message,omitempty"`
	URL               string           `json:"url,omitempty"`
	Ready             bool             `json:"ready"`
	ReadyReplicas     int32            `json:"ready_replicas"`
	BuiltSourceSHA256 string           `json:"built_source_sha256,omitempty"`
	LastBuildID       string           `json:"last_build_id,omitempty"`
	Conditions        []Condition      `json:"conditions"`
	LatestVersion     int32            `json:"latest_version,omitempty" doc:"the newest published version; absent before the first"`
	Serving           []ServingVersion `json:"serving,omitempty" doc:"the effective split: it follows traffic once every version with a share is ready"`
}

// applyFunctionSpec writes a REST spec onto the resource's spec, whole:
// unset optional fields are left unset for the schema's defaults (the one
// owner of them), whether the spec is new or replaces one.
func applyFunctionSpec(dst *slessv1.FunctionSpec, in *FunctionSpec) {
	source, traffic, versioning := dst.Source, dst.Traffic, dst.Versioning
	*dst = slessv1.FunctionSpec{Runtime: slessv1.Runtime(in.Runtime), Entrypoint: in.Entrypoint, Image: in.Image, Source: source,
		AllowSourceBuilds: in.AllowSourceBuilds, Traffic: traffic, Versioning: versioning}
	// Traffic and versioning are kept unless given: a deploy does not
	// undo a split or a rollback.
	if in.Traffic != nil {
		dst.Traffic = trafficCR(in.Traffic)
	}
	if in.Versioning != nil {
		dst.Versioning = &slessv1.Versioning{}
		set(&dst.Versioning.Retain, in.Versioning.Retain)
	}
	if in.Image != "" {
		dst.Source = nil
	}
	set(&dst.MemoryMB, in.MemoryMB)
	set(&dst.CPUMillis, in.CPUMillis)
	set(&dst.TimeoutSec, in.TimeoutSec)
	set(&dst.Concurrency, in.Concurrency)
	if in.MinReplicas != nil || in.MaxReplicas != nil || in.TargetConcurrency != nil || in.ScaleDownDelaySec != nil || in.MaxBuffered != nil ||
		len(in.ScalingSchedules) > 0 {
		// What is left out stays unset: the platform's defaults apply.
		sc := &slessv1.Scaling{}
		if in.MinReplicas != nil {
			sc.MinReplicas = ptr(*in.MinReplicas)
		}
		set(&sc.MaxReplicas, in.MaxReplicas)
		set(&sc.TargetConcurrency, in.TargetConcurrency)
		set(&sc.ScaleDownDelaySeconds, in.ScaleDownDelaySec)
		set(&sc.MaxBufferedRequests, in.MaxBuffered)
		for _, e := range in.ScalingSchedules {
			sc.Schedules = append(sc.Schedules, slessv1.ScalingSchedule{Cron: e.Cron, TimeZone: e.TimeZone,
				DurationSeconds: e.DurationSeconds, MinReplicas: e.MinReplicas})
		}
		dst.Scaling = sc
	}
	names := make([]string, 0, len(in.EnvVars)+len(in.SecretEnvVars))
	for k := range in.EnvVars {
		names = append(names, k)
	}
	for k := range in.SecretEnvVars {
		if _, dup := in.EnvVars[k]; !dup {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	for _, k := range names {
		if ref, ok := in.SecretEnvVars[k]; ok {
			dst.Env = append(dst.Env, slessv1.EnvVar{Name: k, SecretKeyRef: &slessv1.SecretKeySelector{Name: ref.Secret, Key: ref.Key}})
		} else {
			dst.Env = append(dst.Env, slessv1.EnvVar{Name: k, Value: in.EnvVars[k]})
		}
	}
}

func functionREST(f *slessv1.Function) Function {
	s := f.Spec
	out := Function{Name: f.Name, CreatedAt: f.CreationTimestamp.Time, FunctionSpec: FunctionSpec{
		Runtime: Runtime(s.Runtime), Entrypoint: s.Entrypoint, Image: s.Image,
		MemoryMB: ptr(s.MemoryMB), CPUMillis: ptr(s.CPUMillis), TimeoutSec: ptr(s.TimeoutSec), Concurrency: ptr(s.Concurrency),
		EnvVars: map[string]string{}, AllowSourceBuilds: s.AllowSourceBuilds,
	}}
	if s.Scaling != nil {
		if s.Scaling.MinReplicas != nil {
			out.MinReplicas = ptr(*s.Scaling.MinReplicas)
		}
		if s.Scaling.MaxReplicas > 0 {
			out.MaxReplicas = ptr(s.Scaling.MaxReplicas)
		}
		out.TargetConcurrency, out.ScaleDownDelaySec, out.MaxBuffered = ptr(s.Scaling.TargetConcurrency), ptr(s.Scaling.ScaleDownDelaySeconds), ptr(s.Scaling.MaxBufferedRequests)
		for _, e := range s.Scaling.Schedules {
			out.ScalingSchedules = append(out.ScalingSchedules, ScalingSchedule{Cron: e.Cron, TimeZone: e.TimeZone,
				DurationSeconds: e.DurationSeconds, MinReplicas: e.MinReplicas})
		}
	}
	for _, e := range s.Env {
		if e.SecretKeyRef != nil {
			if out.SecretEnvVars == nil {
				out.SecretEnvVars = map[string]SecretRef{}
			}
			out.SecretEnvVars[e.Name] = SecretRef{Secret: e.SecretKeyRef.Name, Key: e.SecretKeyRef.Key}
		} else {
			out.EnvVars[e.Name] = e.Value
		}
	}
	if s.Source != nil {
		out.Source = &FunctionSource{SHA256: s.Source.SHA256, S3Key: s.Source.S3Key}
	}
	out.Traffic = trafficREST(s.Traffic)
	if s.Versioning != nil {
		out.Versioning = &Versioning{Retain: ptr(s.Versioning.Retain)}
	}
	st := f.Status
	out.Status = FunctionStatus{Phase: string(st.Phase), Message: st.Message, URL: st.URL, Ready: f.IsReady(), ReadyReplicas: st.ReadyReplicas,
		BuiltSourceSHA256: st.BuiltSourceSHA256, LastBuildID: st.LastBuildID, Conditions: conditions(st.Conditions),
		LatestVersion: st.LatestVersion, Serving: servingREST(st.Serving)}
	return out
}

func trafficCR(in []TrafficTarget) []slessv1.TrafficTarget {
	out := make([]slessv1.TrafficTarget, 0, len(in))
	for _, t := range in {
		ct := slessv1.TrafficTarget{Latest: t.Latest, Percent: t.Percent, Tag: t.Tag}
		set(&ct.Version, t.Version)
		out = append(out, ct)
	}
	return out
}

func trafficREST(in []slessv1.TrafficTarget) []TrafficTarget {
	if len(in) == 0 {
		return nil
	}
	out := make([]TrafficTarget, 0, len(in))
	for _, t := range in {
		rt := TrafficTarget{Latest: t.Latest, Percent: t.Percent, Tag: t.Tag}
		if t.Version != 0 {
			rt.Version = ptr(t.Version)
		}
		out = append(out, rt)
	}
	return out
}

func servingREST(in []slessv1.ServingVersion) []ServingVersion {
	if len(in) == 0 {
		return nil
	}
	out := make([]ServingVersion, 0, len(in))
	for _, sv := range in {
		out = append(out, ServingVersion{Version: sv.Number, Percent: sv.Percent, Tags: sv.Tags, Ready: sv.Ready, Draining: sv.Draining, Idle: sv.Idle,
			DesiredReplicas: sv.DesiredReplicas, ReadyReplicas: sv.ReadyReplicas, ScalingReason: sv.ScalingReason})
	}
	return out
}

// --------------------------------------------------------------- triggers

// HTTPTrigger exposes a function at /fn/<tenant><path>.
type HTTPTrigger struct {
	Path    string   `json:"path" maxLength:"256" pattern:"^/[A-Za-z0-9._~!$&'()*+,;=:@%/-]*$"`
	Methods []string `json:"methods,omitempty" maxItems:"9" enum:"GET,HEAD,POST,PUT,PATCH,DELETE,OPTIONS"`
	Auth    string   `json:"auth,omitempty" enum:"token,none" doc:"token (default) requires a tenant token; none is public"`
}

// CronTrigger fires on a schedule.
type CronTrigger struct {
	Schedule                string          `json:"schedule" minLength:"1" maxLength:"128" doc:"five fields, or @hourly, @daily, @every 30s ..."`
	TimeZone                string          `json:"time_zone,omitempty" maxLength:"64"`
	ConcurrencyPolicy       string          `json:"concurrency_policy,omitempty" enum:"Allow,Forbid"`
	StartingDeadlineSeconds *int64          `json:"starting_deadline_seconds,omitempty" minimum:"0"`
	Payload                 json.RawMessage `json:"payload,omitempty"`
	PreWarmSeconds          string          `json:"pre_warm_seconds,omitempty" pattern:"^(auto|[0-9]{1,4})$" doc:"how long before each fire one replica is kept ready (until the fire's call ended), also at min_replicas 0: whole seconds, or auto for 1.5 x the observed p95 cold start (60 s until 5 are observed); at most 300 s"`
}

// QueueTrigger consumes a RabbitMQ queue.
type QueueTrigger struct {
	Queue           string     `json:"queue" minLength:"1" maxLength:"255"`
	Exchange        string     `json:"exchange,omitempty" maxLength:"255"`
	RoutingKey      string     `json:"routing_key,omitempty" maxLength:"255"`
	BrokerSecret    *SecretRef `json:"broker_secret,omitempty" doc:"a Secret key holding an amqp:// URL; unset uses the platform broker"`
	Concurrency     *int32     `json:"concurrency,omitempty" minimum:"1" maximum:"256"`
	MaxRetries      *int32     `json:"max_retries,omitempty" minimum:"0" maximum:"20"`
	BackoffInitial  *int32     `json:"backoff_initial_seconds,omitempty" minimum:"1" maximum:"3600"`
	BackoffMax      *int32     `json:"backoff_max_seconds,omitempty" minimum:"1" maximum:"3600"`
	DeadLetterQueue string     `json:"dead_letter_queue,omitempty" maxLength:"255"`
}

// TriggerSpec is what a developer sets on a trigger.
type TriggerSpec struct {
	Function string        `json:"function" pattern:"^[a-z]([-a-z0-9]*[a-z0-9])?$" maxLength:"63"`
	Type     string        `json:"type" enum:"http,cron,queue"`
	Enabled  *bool         `json:"enabled,omitempty"`
	HTTP     *HTTPTrigger  `json:"http,omitempty"`
	Cron     *CronTrigger  `json:"cron,omitempty"`
	Queue    *QueueTrigger `json:"queue,omitempty"`
}

// TriggerInput creates a trigger.
type TriggerInput struct {
	Name string `json:"name" pattern:"^[a-z]([-a-z0-9]*[a-z0-9])?$" maxLength:"63"`
	TriggerSpec
}

// Trigger is a trigger as the API shows it.
type Trigger struct {
	Name string `json:"name"`
	TriggerSpec
	Status    TriggerStatus `json:"status"`
	CreatedAt time.Time     `json:"created_at"`
}

// TriggerReplacement is the body of a PUT: a trigger as GET returns it;
// name may be left out and must otherwise be the path's, status and
// created_at are read-only and ignored.
type TriggerReplacement struct {
	Name string `json:"name,omitempty" maxLength:"63" doc:"optional; must be the name in the path"`
	TriggerSpec
	Status    *TriggerStatus `json:"status,omitempty" readOnly:"true" doc:"read-only, ignored"`
	CreatedAt *time.Time     `json:"created_at,omitempty" readOnly:"true" doc:"read-only, ignored"`
}

func (r *TriggerReplacement) replacement() (string, *TriggerSpec) { return r.Name, &r.TriggerSpec }

// TriggerStatus is read-only.
type TriggerStatus struct {
	Phase        string      `json:"phase,omitempty"`
	Message      string      `json:"message,omitempty"`
	URL          string      `json:"url,omitempty"`
	LastFireTime *time.Time  `json:"last_fire_time,omitempty"`
	NextFireTime *time.Time  `json:"next_fire_time,omitempty"`
	Conditions   []Condition `json:"conditions"`
}

func triggerSpecCR(in *TriggerSpec) slessv1.TriggerSpec {
	s := slessv1.TriggerSpec{FunctionRef: slessv1.LocalRef{Name: in.Function}, Type: slessv1.TriggerType(in.Type), Enabled: in.Enabled}
	if h := in.HTTP; h != nil {
		s.HTTP = &slessv1.HTTPTrigger{Path: h.Path, Methods: h.Methods, Auth: slessv1.HTTPAuth(h.Auth)}
	}
	if c := in.Cron; c != nil {
		s.Cron = &slessv1.CronTrigger{Schedule: c.Schedule, TimeZone: c.TimeZone, ConcurrencyPolicy: slessv1.ConcurrencyPolicy(c.ConcurrencyPolicy),
			StartingDeadlineSeconds: c.StartingDeadlineSeconds, PreWarmSeconds: c.PreWarmSeconds}
		if len(c.Payload) > 0 {
			s.Cron.Payload = &apiextensionsv1.JSON{Raw: c.Payload}
		}
	}
	if q := in.Queue; q != nil {
		s.Queue = &slessv1.QueueTrigger{Queue: q.Queue, Exchange: q.Exchange, RoutingKey: q.RoutingKey, DeadLetterQueue: q.DeadLetterQueue}
		if q.BrokerSecret != nil {
			s.Queue.BrokerSecretRef = &slessv1.SecretKeySelector{Name: q.BrokerSecret.Secret, Key: q.BrokerSecret.Key}
		}
		set(&s.Queue.Concurrency, q.Concurrency)
		set(&s.Queue.MaxRetries, q.MaxRetries)
		if q.BackoffInitial != nil || q.BackoffMax != nil {
			s.Queue.Backoff = &slessv1.Backoff{InitialSeconds: 1, MaxSeconds: 300}
			set(&s.Queue.Backoff.InitialSeconds, q.BackoffInitial)
			set(&s.Queue.Backoff.MaxSeconds, q.BackoffMax)
		}
	}
	return s
}

func triggerREST(t *slessv1.Trigger) Trigger {
	s := t.Spec
	out := Trigger{Name: t.Name, CreatedAt: t.CreationTimestamp.Time, TriggerSpec: TriggerSpec{Function: s.FunctionRef.Name, Type: string(s.Type), Enabled: s.Enabled}}
	if h := s.HTTP; h != nil {
		out.HTTP = &HTTPTrigger{Path: h.Path, Methods: h.Methods, Auth: string(h.Auth)}
	}
	if c := s.Cron; c != nil {
		out.Cron = &CronTrigger{Schedule: c.Schedule, TimeZone: c.TimeZone, ConcurrencyPolicy: string(c.ConcurrencyPolicy), StartingDeadlineSeconds: c.StartingDeadlineSeconds,
			PreWarmSeconds: c.PreWarmSeconds}
		if c.Payload != nil {
			out.Cron.Payload = c.Payload.Raw
		}
	}
	if q := s.Queue; q != nil {
		out.Queue = &QueueTrigger{Queue: q.Queue, Exchange: q.Exchange, RoutingKey: q.RoutingKey, DeadLetterQueue: q.DeadLetterQueue,
			Concurrency: ptr(q.Concurrency), MaxRetries: ptr(q.MaxRetries)}
		if q.BrokerSecretRef != nil {
			out.Queue.BrokerSecret = &SecretRef{Secret: q.BrokerSecretRef.Name, Key: q.BrokerSecretRef.Key}
		}
		if q.Backoff != nil {
			out.Queue.BackoffInitial, out.Queue.BackoffMax = ptr(q.Backoff.InitialSeconds), ptr(q.Backoff.MaxSeconds)
		}
	}
	st := t.Status
	out.Status = TriggerStatus{Phase: string(st.Phase), Message: st.Message, URL: st.URL, Conditions: conditions(st.Conditions)}
	if st.LastFireTime != nil {
		out.Status.LastFireTime = &st.LastFireTime.Time
	}
	if st.NextFireTime != nil {
		out.Status.NextFireTime = &st.NextFireTime.Time
	}
	return out
}

// ------------------------------------------------------------------- jobs

// JobSpec is what a developer sets on a job.
type JobSpec struct {
	Function   string          `json:"function" pattern:"^[a-z]([-a-z0-9]*[a-z0-9])?$" maxLength:"63"`
	RunID      *int64          `json:"run_id,omitempty" minimum:"0" doc:"0 never runs; each new value runs once"`
	Payload    json.RawMessage `json:"payload,omitempty"`
	TimeoutSec *int32          `json:"timeout_sec,omitempty" minimum:"0" maximum:"3600"`
	MaxRetries *int32          `json:"max_retries,omitempty" minimum:"0" maximum:"10"`
}

// JobInput creates a job.
type JobInput struct {
	Name string `json:"name" pattern:"^[a-z]([-a-z0-9]*[a-z0-9])?$" maxLength:"63"`
	JobSpec
}

// Job is a job as the API shows it.
type Job struct {
	Name string `json:"name"`
	JobSpec
	Status    JobStatus `json:"status"`
	CreatedAt time.Time `json:"created_at"`
}

// JobReplacement is the body of a PUT: a job as GET returns it; name may
// be left out and must otherwise be the path's, status and created_at are
// read-only and ignored.
type JobReplacement struct {
	Name string `json:"name,omitempty" maxLength:"63" doc:"optional; must be the name in the path"`
	JobSpec
	Status    *JobStatus `json:"status,omitempty" readOnly:"true" doc:"read-only, ignored"`
	CreatedAt *time.Time `json:"created_at,omitempty" readOnly:"true" doc:"read-only, ignored"`
}

func (r *JobReplacement) replacement() (string, *JobSpec) { return r.Name, &r.JobSpec }

// JobStatus is read-only.
type JobStatus struct {
	Phase          string      `json:"phase,omitempty"`
	Message        string      `json:"message,omitempty"`
	LastRunID      int64       `json:"last_run_id"`
	InvocationID   string      `json:"invocation_id,omitempty"`
	StartTime      *time.Time  `json:"start_time,omitempty"`
	CompletionTime *time.Time  `json:"completion_time,omitempty"`
	Attempts       int32       `json:"attempts"`
	Result         string      `json:"result,omitempty"`
	Conditions     []Condition `json:"conditions"`
}

func jobSpecCR(in *JobSpec) slessv1.FunctionJobSpec {
	s := slessv1.FunctionJobSpec{FunctionRef: slessv1.LocalRef{Name: in.Function}}
	if in.RunID != nil {
		s.RunID = *in.RunID
	}
	if len(in.Payload) > 0 {
		s.Payload = &apiextensionsv1.JSON{Raw: in.Payload}
	}
	set(&s.TimeoutSec, in.TimeoutSec)
	set(&s.MaxRetries, in.MaxRetries)
	return s
}

func jobREST(j *slessv1.FunctionJob) Job {
	s := j.Spec
	out := Job{Name: j.Name, CreatedAt: j.CreationTimestamp.Time, JobSpec: JobSpec{Function: s.FunctionRef.Name, RunID: &s.RunID,
		TimeoutSec: ptr(s.TimeoutSec), MaxRetries: ptr(s.MaxRetries)}}
	if s.Payload != nil {
		out.Payload = s.Payload.Raw
	}
	st := j.Status
	out.Status = JobStatus{Phase: string(st.Phase), Message: st.Message, LastRunID: st.LastRunID, InvocationID: st.InvocationID,
		Attempts: st.Attempts, Result: st.Result, Conditions: conditions(st.Conditions)}
	if st.StartTime != nil {
		out.Status.StartTime = &st.StartTime.Time
	}
	if st.CompletionTime != nil {
		out.Status.CompletionTime = &st.CompletionTime.Time
	}
	return out
}

func set[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}

func ptr[T any](v T) *T { return &v }

package v1alpha1

import (
	"strconv"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LocalRef names an object in the same namespace.
type LocalRef struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
}

// TriggerType names how a Trigger fires.
// +kubebuilder:validation:Enum=http;cron;queue
type TriggerType string

// Trigger types.
const (
	TriggerHTTP  TriggerType = "http"
	TriggerCron  TriggerType = "cron"
	TriggerQueue TriggerType = "queue"
)

// TriggerSpec says what invokes a Function.
//
// +kubebuilder:validation:XValidation:rule="self.type != 'http' || has(self.http)",message="http is required when type is http"
// +kubebuilder:validation:XValidation:rule="self.type != 'cron' || has(self.cron)",message="cron is required when type is cron"
// +kubebuilder:validation:XValidation:rule="self.type != 'queue' || has(self.queue)",message="queue is required when type is queue"
// +kubebuilder:validation:XValidation:rule="(has(self.http) ? 1 : 0) + (has(self.cron) ? 1 : 0) + (has(self.queue) ? 1 : 0) <= 1",message="only the section matching type may be set"
type TriggerSpec struct {
	// FunctionRef is the Function to invoke, in the same namespace.
	FunctionRef LocalRef `json:"functionRef"`
	// Type selects which of http, cron or queue applies.
	Type TriggerType `json:"type"`
	// Enabled false keeps the trigger but stops it firing.
	// +optional
	// +kubebuilder:default=true
	Enabled *bool `json:"enabled,omitempty"`
	// +optional
	HTTP *HTTPTrigger `json:"http,omitempty"`
	// +optional
	Cron *CronTrigger `json:"cron,omitempty"`
	// +optional
	Queue *QueueTrigger `json:"queue,omitempty"`
}

// HTTPAuth says how public HTTP callers authenticate.
// +kubebuilder:validation:Enum=token;none
type HTTPAuth string

// HTTP trigger auth modes.
const (
	HTTPAuthToken HTTPAuth = "token"
	HTTPAuthNone  HTTPAuth = "none"
)

// HTTPTrigger exposes a Function at /fn/<tenant><path>.
type HTTPTrigger struct {
	// Path under /fn/<tenant>, starting with a slash.
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^/[A-Za-z0-9._~!$&'()*+,;=:@%/-]*$`
	Path string `json:"path"`
	// Methods allowed; empty allows all.
	// +optional
	// +kubebuilder:validation:MaxItems=9
	// +kubebuilder:validation:items:Enum=GET;HEAD;POST;PUT;PATCH;DELETE;OPTIONS
	Methods []string `json:"methods,omitempty"`
	// Auth is token (a tenant token is required) or none (public).
	// +optional
	// +kubebuilder:default=token
	Auth HTTPAuth `json:"auth,omitempty"`
}

// ConcurrencyPolicy says what a cron trigger does when the previous fire still runs.
// +kubebuilder:validation:Enum=Allow;Forbid
type ConcurrencyPolicy string

// Concurrency policies.
const (
	ConcurrencyAllow  ConcurrencyPolicy = "Allow"
	ConcurrencyForbid ConcurrencyPolicy = "Forbid"
)

// CronTrigger fires a Function on a schedule.
type CronTrigger struct {
	// Schedule is a five-field cron expression or a descriptor such as
	// @hourly or @every 30s.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	Schedule string `json:"schedule"`
	// TimeZone is an IANA zone name; the default is UTC.
	// +optional
	// +kubebuilder:default=UTC
	// +kubebuilder:validation:MaxLength=64
	TimeZone string `json:"timeZone,omitempty"`
	// +optional
	// +kubebuilder:default=Allow
	ConcurrencyPolicy ConcurrencyPolicy `json:"concurrencyPolicy,omitempty"`
	// StartingDeadlineSeconds is how late a missed fire may still run; later
	// fires are recorded as missed. Unset catches up one missed fire.
	// +optional
	// +kubebuilder:validation:Minimum=0
	StartingDeadlineSeconds *int64 `json:"startingDeadlineSeconds,omitempty"`
	// Payload is the JSON body sent with every fire.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	Payload *apiextensionsv1.JSON `json:"payload,omitempty"`
	// PreWarmSeconds keeps one replica of the Function ready for each fire,
	// also with scaling.minReplicas 0: the operator holds a floor of one
	// replica from the fire time minus this lead until shortly after the
	// fire. A whole number of seconds, or "auto": 1.5 x the observed p95
	// cold start, 60 s before one is observed. At most 300 s either way;
	// unset or 0 keeps no replica ready (the fire's call wakes the Function).
	// +optional
	// +kubebuilder:validation:Pattern=`^(auto|[0-9]{1,4})$`
	PreWarmSeconds string `json:"preWarmSeconds,omitempty"`
}

// QueueTrigger consumes a RabbitMQ queue, one invocation per message.
//
// +kubebuilder:validation:XValidation:rule="!self.queue.startsWith('amq.')",message="queue names starting with amq. are reserved by the broker"
// +kubebuilder:validation:XValidation:rule="!has(self.exchange) || !self.exchange.startsWith('amq.')",message="exchange names starting with amq. are reserved by the broker"
// +kubebuilder:validation:XValidation:rule="!has(self.deadLetterQueue) || !self.deadLetterQueue.startsWith('amq.')",message="queue names starting with amq. are reserved by the broker"
type QueueTrigger struct {
	// Queue to consume.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	Queue string `json:"queue"`
	// Exchange to bind the queue to, with RoutingKey.
	// +optional
	// +kubebuilder:validation:MaxLength=255
	Exchange string `json:"exchange,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=255
	RoutingKey string `json:"routingKey,omitempty"`
	// BrokerSecretRef names a Secret key holding an amqp:// URL of an external
	// broker; unset consumes from the tenant's own vhost on the platform
	// broker, never from the platform's.
	// +optional
	BrokerSecretRef *SecretKeySelector `json:"brokerSecretRef,omitempty"`
	// Concurrency is the number of messages handled at once (the prefetch).
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=256
	Concurrency int32 `json:"concurrency,omitempty"`
	// MaxRetries is how often a failed message is retried.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=20
	MaxRetries int32 `json:"maxRetries,omitempty"`
	// +optional
	// +kubebuilder:default={initialSeconds: 1, maxSeconds: 300}
	Backoff *Backoff `json:"backoff,omitempty"`
	// DeadLetterQueue receives exhausted messages; the default is <queue>.dlq.
	// +optional
	// +kubebuilder:validation:MaxLength=255
	DeadLetterQueue string `json:"deadLetterQueue,omitempty"`
}

// Backoff is an exponential retry delay.
//
// +kubebuilder:validation:XValidation:rule="self.initialSeconds <= self.maxSeconds",message="initialSeconds must not exceed maxSeconds"
type Backoff struct {
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	InitialSeconds int32 `json:"initialSeconds"`
	// +optional
	// +kubebuilder:default=300
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	MaxSeconds int32 `json:"maxSeconds"`
}

// TriggerPhase is the coarse state of a Trigger.
// +kubebuilder:validation:Enum=Waiting;Active;Disabled;Failed
type TriggerPhase string

// Trigger phases.
const (
	TriggerWaiting  TriggerPhase = "Waiting"
	TriggerActive   TriggerPhase = "Active"
	TriggerDisabled TriggerPhase = "Disabled"
	TriggerFailed   TriggerPhase = "Failed"
)

// TriggerStatus is what the platform observed of a Trigger.
type TriggerStatus struct {
	// +optional
	Phase TriggerPhase `json:"phase,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// URL is the public address of an http trigger.
	// +optional
	URL string `json:"url,omitempty"`
	// +optional
	LastFireTime *metav1.Time `json:"lastFireTime,omitempty"`
	// +optional
	NextFireTime *metav1.Time `json:"nextFireTime,omitempty"`
}

// Trigger invokes a Function on HTTP requests, a schedule or queue messages.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=sltr
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Function",type=string,JSONPath=`.spec.functionRef.name`
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= 63",message="trigger name must be a DNS-1123 label starting with a letter"
type Trigger struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec TriggerSpec `json:"spec"`
	// +optional
	Status TriggerStatus `json:"status,omitempty"`
}

// TriggerList is a list of Triggers.
//
// +kubebuilder:object:root=true
type TriggerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Trigger `json:"items"`
}

// IsEnabled reports whether the trigger should fire; unset means enabled.
func (t *Trigger) IsEnabled() bool { return t.Spec.Enabled == nil || *t.Spec.Enabled }

// PreWarmSetting reads a cron.preWarmSeconds value: auto for "auto", else
// the whole number of seconds it gives. Neither (unset, 0, or anything the
// schema does not admit) keeps no replica ready for the fires.
func PreWarmSetting(s string) (auto bool, seconds int) {
	s = strings.TrimSpace(s)
	if s == "auto" {
		return true, 0
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		return false, 0
	}
	return false, n
}

// PreWarms tells whether the trigger keeps a replica of its Function ready
// for each fire (cron.preWarmSeconds, PreWarmSetting).
func (c *CronTrigger) PreWarms() bool {
	if c == nil {
		return false
	}
	auto, n := PreWarmSetting(c.PreWarmSeconds)
	return auto || n > 0
}

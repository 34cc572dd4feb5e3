package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TenantSpec is what a platform team grants one customer.
type TenantSpec struct {
	// DisplayName is a human-readable name; it has no effect on behaviour.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	DisplayName string `json:"displayName,omitempty"`

	// Quotas bound what the tenant may use. Unset fields take the defaults.
	// +optional
	// +kubebuilder:default={}
	Quotas TenantQuotas `json:"quotas,omitempty"`

	// Network controls the egress of the tenant's functions.
	// +optional
	// +kubebuilder:default={}
	Network TenantNetwork `json:"network,omitempty"`
}

// TenantQuotas are the limits of one tenant.
type TenantQuotas struct {
	// MaxFunctions is the number of Functions the tenant may have.
	// +optional
	// +kubebuilder:default=50
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	MaxFunctions int32 `json:"maxFunctions,omitempty"`

	// MaxPods is the number of function pods (or local processes) at once.
	// +optional
	// +kubebuilder:default=100
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	MaxPods int32 `json:"maxPods,omitempty"`

	// CPUMillis is the total CPU the tenant's functions may request.
	// +optional
	// +kubebuilder:default=8000
	// +kubebuilder:validation:Minimum=0
	CPUMillis int32 `json:"cpuMillis,omitempty"`

	// MemoryMB is the total memory the tenant's functions may request.
	// +optional
	// +kubebuilder:default=16384
	// +kubebuilder:validation:Minimum=0
	MemoryMB int32 `json:"memoryMB,omitempty"`

	// InvocationsPerSecond is the sustained rate of API and invoke requests;
	// bursts of twice the rate are allowed.
	// +optional
	// +kubebuilder:default=100
	// +kubebuilder:validation:Minimum=1
	InvocationsPerSecond int32 `json:"invocationsPerSecond,omitempty"`

	// ConcurrentBuilds is the number of builds that may run at once.
	// +optional
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	ConcurrentBuilds int32 `json:"concurrentBuilds,omitempty"`

	// MaxConcurrentInvocations is the number of the tenant's queued calls
	// (async, cron, jobs) one invoker replica runs at once; further calls
	// wait in the broker, so that one tenant's slow calls cannot hold every
	// slot of a replica. Unset (0) takes the invoker's default, a fraction
	// of its slots.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4096
	MaxConcurrentInvocations int32 `json:"maxConcurrentInvocations,omitempty"`
}

// TenantNetwork is the egress policy of a tenant's functions. Ingress is always
// limited to the sless gateway and invoker.
type TenantNetwork struct {
	// InternetEgress allows functions to reach addresses outside the cluster.
	// +optional
	// +kubebuilder:default=true
	InternetEgress *bool `json:"internetEgress,omitempty"`

	// DeniedEgressCIDRs are blocked in addition to the cluster ranges and the
	// cloud metadata address, which are always blocked.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	DeniedEgressCIDRs []string `json:"deniedEgressCIDRs,omitempty"`
}

// TenantPhase is the coarse state of a Tenant.
// +kubebuilder:validation:Enum=Pending;Ready;Terminating;Failed
type TenantPhase string

// Tenant phases.
const (
	TenantPending     TenantPhase = "Pending"
	TenantReady       TenantPhase = "Ready"
	TenantTerminating TenantPhase = "Terminating"
	TenantFailed      TenantPhase = "Failed"
)

// TenantStatus is what the operator observed of a Tenant.
type TenantStatus struct {
	// +optional
	Phase TenantPhase `json:"phase,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// Namespace holds the tenant's functions.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Tenant is one customer of the platform. It owns the namespace
// sless-fn-<name> and everything in it.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=slt
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Namespace",type=string,JSONPath=`.status.namespace`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= 54",message="tenant name must be a DNS-1123 label of at most 54 characters starting with a letter (the namespace sless-fn-<name> must fit 63)"
type Tenant struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec TenantSpec `json:"spec,omitempty"`
	// +optional
	Status TenantStatus `json:"status,omitempty"`
}

// TenantList is a list of Tenants.
//
// +kubebuilder:object:root=true
type TenantList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Tenant `json:"items"`
}

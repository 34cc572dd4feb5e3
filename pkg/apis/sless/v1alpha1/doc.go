// Package v1alpha1 owns the sless custom resources (API group sless.kube5s.ru):
// Tenant, Function, Trigger and FunctionJob, their validation markers and the
// condition helpers every controller and reader of them shares.
//
// +kubebuilder:object:generate=true
// +groupName=sless.kube5s.ru
package v1alpha1

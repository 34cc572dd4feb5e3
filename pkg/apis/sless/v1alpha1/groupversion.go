package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API group and version of every sless resource.
var GroupVersion = schema.GroupVersion{Group: "sless.kube5s.ru", Version: "v1alpha1"}

// SchemeBuilder registers the sless types. It is built without init() so that
// importing the package has no side effects; callers add it to their scheme.
var SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

// AddToScheme adds the sless types to a scheme.
var AddToScheme = SchemeBuilder.AddToScheme

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&Tenant{}, &TenantList{},
		&Function{}, &FunctionList{},
		&Trigger{}, &TriggerList{},
		&FunctionJob{}, &FunctionJobList{},
		&FunctionVersion{}, &FunctionVersionList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

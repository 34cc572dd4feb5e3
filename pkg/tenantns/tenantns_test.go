package tenantns

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func TestOf(t *testing.T) {
	for _, tt := range []struct {
		name   string
		ns     string
		labels map[string]string
		want   string
	}{
		{"a tenant namespace", "sless-fn-acme", map[string]string{Label: "acme"}, "acme"},
		{"default, unlabelled", "default", nil, ""},
		{"the prefix without a label", "sless-fn-acme", nil, ""},
		{"a label that disagrees with the name", "default", map[string]string{Label: "acme"}, ""},
		{"another tenant's label", "sless-fn-acme", map[string]string{Label: "evil"}, ""},
		{"an empty label", "sless-fn-", map[string]string{Label: ""}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tt.ns, Labels: tt.labels}}
			if got := Of(ns); got != tt.want {
				t.Errorf("Of(%s %v) = %q, want %q", tt.ns, tt.labels, got, tt.want)
			}
		})
	}
}

func TestSelectorMatchesLabelledNamespacesOnly(t *testing.T) {
	s := Selector()
	if !s.Matches(labels.Set{Label: "acme"}) || s.Matches(labels.Set{"kubernetes.io/metadata.name": "default"}) {
		t.Errorf("selector %s", s)
	}
}

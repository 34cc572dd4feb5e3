package api

import (
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
)

// TestFunctionIsFoundBeforeItsNameIsChecked: a function the watch cache
// holds is returned as it is held; a miss is a 404, and before the cache
// has synced only a name that cannot exist is a 404 and any other one
// is "not loaded yet".
func TestFunctionIsFoundBeforeItsNameIsChecked(t *testing.T) {
	store := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, nil)
	held := &slessv1.Function{ObjectMeta: metav1.ObjectMeta{Namespace: slessv1.NamespaceFor("acme"), Name: "hello"}}
	if err := store.Add(held); err != nil {
		t.Fatal(err)
	}
	synced := false
	s := &Server{functions: store, loaded: func() bool { return synced }}
	for _, c := range []struct {
		synced       bool
		tenant, name string
		want         func(error) bool
	}{
		{true, "acme", "hello", nil},
		{true, "acme", "other", apierrors.IsNotFound},
		{true, "acme", "UPPER", apierrors.IsNotFound},
		{true, "a/b", "hello", apierrors.IsNotFound},
		{true, "acme", strings.Repeat("x", 300), apierrors.IsNotFound},
		{false, "acme", "hello", func(err error) bool { return errors.Is(err, errNotLoaded) }},
		{false, "acme", "..", apierrors.IsNotFound},
		{false, "ACME", "hello", apierrors.IsNotFound},
	} {
		synced = c.synced
		fn, err := s.function(t.Context(), c.tenant, c.name)
		switch {
		case c.want == nil && (err != nil || fn != held):
			t.Errorf("synced %v, %s/%s: %v, %v; want the function the cache holds", c.synced, c.tenant, c.name, fn, err)
		case c.want != nil && (fn != nil || !c.want(err)):
			t.Errorf("synced %v, %s/%s: %v, %v", c.synced, c.tenant, c.name, fn, err)
		}
	}
}

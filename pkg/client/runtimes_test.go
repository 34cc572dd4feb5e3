package client_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/client"
)

// TestRuntimesAreTheCRDs holds the clients' list to the one in the CRD
// types: a runtime added there, and so to the API's enum, is offered by
// the CLI and the provider too.
func TestRuntimesAreTheCRDs(t *testing.T) {
	var want, got []string
	for _, r := range slessv1.Runtimes() {
		want = append(want, string(r))
	}
	for _, r := range client.Runtimes() {
		got = append(got, string(r))
		if !r.Valid() || !client.FunctionRuntime(r).Valid() || !client.FunctionReplacementRuntime(r).Valid() {
			t.Errorf("%s is not in every generated runtime enum", r)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("client.Runtimes() against slessv1.Runtimes() (-slessv1 +client):\n%s", diff)
	}
}

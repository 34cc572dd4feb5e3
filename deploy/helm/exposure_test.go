package helm

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// serviceTypes are the gateway.service.type values the schema allows, with
// the values that choose each.
var serviceTypes = map[string]map[string]any{
	"ClusterIP":    {},
	"NodePort":     {"gateway": map[string]any{"replicas": 2, "service": map[string]any{"type": "NodePort", "nodePort": 30080}}},
	"LoadBalancer": {"gateway": map[string]any{"replicas": 2, "service": map[string]any{"type": "LoadBalancer"}}},
}

// services returns the Services of a rendered manifest.
func services(t *testing.T, manifest string) []corev1.Service {
	t.Helper()
	var out []corev1.Service
	for _, o := range objects(t, manifest) {
		if o.GetKind() != "Service" {
			continue
		}
		var s corev1.Service
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// TestOpsPortIsNeverPublic renders the chart with every gateway Service
// type and checks that no NodePort or LoadBalancer Service carries an ops
// port (/readyz, /metrics, debug handlers): those are reachable from
// outside the cluster. Each component's ops port is still on a ClusterIP
// Service, where probes and monitoring find it.
func TestOpsPortIsNeverPublic(t *testing.T) {
	c := load(t)
	for typ, vals := range serviceTypes {
		t.Run(typ, func(t *testing.T) {
			manifest, err := render(c, vals)
			if err != nil {
				t.Fatal(err)
			}
			opsOn := map[string]string{} // component -> the ClusterIP Service with its ops port
			sawType := false
			for _, s := range services(t, manifest) {
				public := s.Spec.Type == corev1.ServiceTypeNodePort || s.Spec.Type == corev1.ServiceTypeLoadBalancer
				if string(s.Spec.Type) == typ || s.Spec.Type == "" && typ == "ClusterIP" {
					sawType = true
				}
				for _, p := range s.Spec.Ports {
					ops := p.Name == "ops" || p.TargetPort.String() == "ops"
					if ops && public {
						t.Errorf("Service %s (type %s) exposes the ops port %d: %+v", s.Name, s.Spec.Type, p.Port, s.Spec.Ports)
					}
					if ops && !public {
						opsOn[s.Labels["app.kubernetes.io/component"]] = s.Name
					}
				}
			}
			if !sawType {
				t.Errorf("no Service of type %s rendered", typ)
			}
			var missing []string
			for _, comp := range []string{"gateway", "builder", "operator", "invoker", "scheduler"} {
				if opsOn[comp] == "" {
					missing = append(missing, comp)
				}
			}
			sort.Strings(missing)
			if len(missing) > 0 {
				t.Errorf("no ClusterIP Service carries the ops port of %s (ops ports found on: %v)", strings.Join(missing, ", "), fmt.Sprint(opsOn))
			}
		})
	}
}

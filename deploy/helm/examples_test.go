package helm

import (
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestExampleValuesAllowTheirPorts renders each example values file of
// docs/install.md (deploy/helm/examples) and checks that every port its
// addresses use is in the egress rules of the pods that connect there:
// platform pods reach the management API, the object store and the
// collector; build pods the object store and the registry.
func TestExampleValuesAllowTheirPorts(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("examples", "*.yaml"))
	if len(files) == 0 {
		t.Fatal("no example values in deploy/helm/examples")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var v struct {
				Rabbitmq struct{ ManagementURL string } `json:"rabbitmq"`
				S3       struct{ Endpoint string }      `json:"s3"`
				Registry struct {
					URL          string
					DeleteImages *bool `json:"deleteImages"`
				} `json:"registry"`
				Otel struct{ Endpoint string } `json:"otel"`
				NP   struct {
					PlatformEgress []struct{ Ports []int } `json:"platformEgress"`
					BuildEgress    []struct{ Ports []int } `json:"buildEgress"`
				} `json:"networkPolicy"`
			}
			if err := yaml.Unmarshal(b, &v); err != nil {
				t.Fatal(err)
			}
			var vals map[string]any
			_ = yaml.Unmarshal(b, &vals)
			if _, err := render(load(t), vals); err != nil {
				t.Fatalf("%s does not render: %v", f, err)
			}
			allowed := func(rules []struct{ Ports []int }) map[int]bool {
				m := map[int]bool{}
				for _, r := range rules {
					for _, p := range r.Ports {
						m[p] = true
					}
				}
				return m
			}
			platform, build := allowed(v.NP.PlatformEgress), allowed(v.NP.BuildEgress)
			check := func(who string, ok map[int]bool, what, addr string) {
				if addr == "" {
					return
				}
				p := portOf(t, addr)
				if !ok[p] {
					t.Errorf("%s %s uses port %d, which %s egress does not allow", what, addr, p, who)
				}
			}
			check("the platform's", platform, "rabbitmq.managementURL", v.Rabbitmq.ManagementURL)
			check("the platform's", platform, "s3.endpoint", v.S3.Endpoint)
			check("the platform's", platform, "otel.endpoint", v.Otel.Endpoint)
			check("the build's", build, "s3.endpoint", v.S3.Endpoint)
			check("the build's", build, "registry.url", v.Registry.URL)
			if v.Registry.DeleteImages == nil || *v.Registry.DeleteImages {
				check("the platform's", platform, "registry.url (the operator deletes images there)", v.Registry.URL)
			}
		})
	}
}

// portOf returns the port of a URL or host:port (443 for https or a bare
// registry host, 80 for http).
func portOf(t *testing.T, addr string) int {
	t.Helper()
	host := addr
	if u, err := url.Parse(addr); err == nil && u.Host != "" {
		host = u.Host
		if u.Port() == "" {
			if u.Scheme == "http" {
				return 80
			}
			return 443
		}
	}
	host, _, _ = strings.Cut(host, "/")
	_, p, err := net.SplitHostPort(host)
	if err != nil {
		return 443 // a registry host without a port
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("port of %s: %v", addr, err)
	}
	return n
}

package main

import (
	"strings"
	"testing"
)

// TestKubernetesDriverNeedsDigestPinnedImages: the kubernetes driver
// refuses to start without the builder image and both runtime bases, or
// with any of them by tag, and names every offender at once.
func TestKubernetesDriverNeedsDigestPinnedImages(t *testing.T) {
	pinned := "@sha256:" + strings.Repeat("0", 64)
	base := map[string]string{"SLESS_BUILD_DRIVER": "kubernetes", "SLESS_REGISTRY": "registry.example/fn",
		"SLESS_BUILD_HELPER_IMAGE": "registry.example/builder" + pinned, "SLESS_BUILD_BASE_PYTHON311_IMAGE": "registry.example/python" + pinned,
		"SLESS_BUILD_BASE_NODEJS20_IMAGE": "registry.example/node" + pinned,
		"SLESS_S3_ENDPOINT":               "minio.example:9000", "SLESS_S3_ACCESS_KEY": "a", "SLESS_S3_SECRET_KEY": "s"}
	for _, tc := range []struct {
		name string
		set  map[string]string
		want []string // in the error; none: valid
	}{
		{"all pinned", nil, nil},
		{"bases missing", map[string]string{"SLESS_BUILD_BASE_PYTHON311_IMAGE": "", "SLESS_BUILD_BASE_NODEJS20_IMAGE": ""},
			[]string{"SLESS_BUILD_BASE_NODEJS20_IMAGE is required", "SLESS_BUILD_BASE_PYTHON311_IMAGE is required"}},
		{"base by tag", map[string]string{"SLESS_BUILD_BASE_NODEJS20_IMAGE": "docker.io/library/node:20"},
			[]string{"SLESS_BUILD_BASE_NODEJS20_IMAGE=docker.io/library/node:20 must be pinned by digest"}},
		{"helper by tag, no registry", map[string]string{"SLESS_BUILD_HELPER_IMAGE": "registry.example/builder:v1", "SLESS_REGISTRY": ""},
			[]string{"SLESS_BUILD_HELPER_IMAGE=registry.example/builder:v1 must be pinned", "SLESS_REGISTRY is required"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range base {
				env[k] = v
			}
			for k, v := range tc.set {
				env[k] = v
			}
			c, err := loadConfig(func(k string) string { return env[k] })
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if c.Kube.BaseImages["nodejs20"] != base["SLESS_BUILD_BASE_NODEJS20_IMAGE"] || c.Kube.BaseImages["python3.11"] != base["SLESS_BUILD_BASE_PYTHON311_IMAGE"] {
					t.Errorf("base images %v", c.Kube.BaseImages)
				}
				return
			}
			if err == nil {
				t.Fatal("the configuration was accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not say %q: %v", w, err)
				}
			}
		})
	}
}

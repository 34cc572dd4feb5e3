package main

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/archive"
	"github.com/kube5s/sless/pkg/envconf"
	"github.com/kube5s/sless/pkg/kubeclient"
	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/pkg/service"
	"github.com/kube5s/sless/services/builder/internal/kubejob"
	"github.com/kube5s/sless/services/builder/internal/localbuild"
)

type config struct {
	service.Common
	service.Deps
	Driver            string // SLESS_BUILD_DRIVER: local or kubernetes
	S3                objstore.Config
	Concurrency       int            // SLESS_BUILD_CONCURRENCY: builds at once on this replica
	DefaultTenantMax  int            // SLESS_BUILD_TENANT_DEFAULT: per-tenant limit when no Tenant quota is readable
	Lease             time.Duration  // SLESS_BUILD_LEASE: how long a dead replica holds a build
	MaxArchiveBytes   int64          // SLESS_BUILD_MAX_ARCHIVE_BYTES
	Limits            archive.Limits // SLESS_BUILD_MAX_UNPACKED_BYTES, SLESS_BUILD_MAX_ENTRIES
	ArtifactDir       string         // SLESS_ARTIFACT_DIR: local driver output
	InstallTimeout    time.Duration  // SLESS_BUILD_INSTALL_TIMEOUT
	Python, Node, Npm string         // SLESS_PYTHON, SLESS_NODE, SLESS_NPM
	InstallEnv        []string       // what pip and npm see of the environment (localbuild.InstallEnv)
	Kube              kubejob.Config
}

// builderKubeRate is the builder's default client rate: it creates a
// build's Job and Secret and reads quotas, a few requests per build.
var builderKubeRate = kubeclient.Rate{QPS: 20, Burst: 40}

func loadConfig(getenv func(string) string) (config, error) {
	r := envconf.New(getenv)
	c := config{
		Common:           service.ReadCommon(r, ":9091"),
		Deps:             service.ReadDeps(r, builderKubeRate),
		Driver:           r.OneOf("SLESS_BUILD_DRIVER", "local", "local", "kubernetes"),
		S3:               objstore.ReadConfig(r),
		Concurrency:      r.Int("SLESS_BUILD_CONCURRENCY", 2, 1, 64),
		DefaultTenantMax: r.Int("SLESS_BUILD_TENANT_DEFAULT", 2, 1, 64),
		Lease:            r.Duration("SLESS_BUILD_LEASE", 30*time.Second),
		ArtifactDir:      r.String("SLESS_ARTIFACT_DIR", filepath.Join(os.TempDir(), "sless-artifacts")),
		InstallTimeout:   r.Duration("SLESS_BUILD_INSTALL_TIMEOUT", 5*time.Minute),
		Python:           r.String("SLESS_PYTHON", "python3"),
		Node:             r.String("SLESS_NODE", "node"),
		Npm:              r.String("SLESS_NPM", "npm"),
		InstallEnv:       localbuild.InstallEnv(getenv),
		Kube: kubejob.Config{
			Namespace:   r.String("SLESS_BUILD_NAMESPACE", "sless-builds"),
			HelperImage: r.String("SLESS_BUILD_HELPER_IMAGE", ""),
			BaseImages: map[string]string{
				string(slessv1.RuntimePython311): r.String("SLESS_BUILD_BASE_PYTHON311_IMAGE", ""),
				string(slessv1.RuntimeNodeJS20):  r.String("SLESS_BUILD_BASE_NODEJS20_IMAGE", ""),
			},
			Registry:         r.String("SLESS_REGISTRY", ""),
			RegistryInsecure: r.Bool("SLESS_REGISTRY_INSECURE", false),
			RegistrySecret:   r.String("SLESS_REGISTRY_SECRET", "sless-registry"),
			S3Secret:         r.String("SLESS_BUILD_S3_SECRET", "sless-s3"),
			Deadline:         r.Duration("SLESS_BUILD_DEADLINE", 15*time.Minute),
			CPU:              r.String("SLESS_BUILD_CPU", "1"),
			Memory:           r.String("SLESS_BUILD_MEMORY", "2Gi"),
		},
	}
	c.MaxArchiveBytes, c.Limits = archiveLimits(r)
	c.Kube.HelperEnv = map[string]string{
		"SLESS_S3_ENDPOINT": c.S3.Endpoint, "SLESS_S3_BUCKET": c.S3.Bucket, "SLESS_S3_SECURE": strconv.FormatBool(c.S3.Secure),
		"SLESS_BUILD_MAX_ARCHIVE_BYTES":  strconv.FormatInt(c.MaxArchiveBytes, 10),
		"SLESS_BUILD_MAX_UNPACKED_BYTES": strconv.FormatInt(c.Limits.MaxBytes, 10),
		"SLESS_BUILD_MAX_ENTRIES":        strconv.Itoa(c.Limits.MaxEntries),
	}
	if c.S3.Region != "" {
		c.Kube.HelperEnv["SLESS_S3_REGION"] = c.S3.Region
	}
	if c.Lease < 3*time.Second {
		r.Failf("SLESS_BUILD_LEASE must be at least 3s")
	}
	if c.Driver == "kubernetes" {
		required := map[string]string{"SLESS_REGISTRY": c.Kube.Registry, "SLESS_BUILD_HELPER_IMAGE": c.Kube.HelperImage,
			"SLESS_BUILD_BASE_PYTHON311_IMAGE": c.Kube.BaseImages[string(slessv1.RuntimePython311)], "SLESS_BUILD_BASE_NODEJS20_IMAGE": c.Kube.BaseImages[string(slessv1.RuntimeNodeJS20)]}
		for _, k := range slices.Sorted(maps.Keys(required)) {
			switch v := required[k]; {
			case v == "":
				r.Failf("%s is required with SLESS_BUILD_DRIVER=kubernetes", k)
			case k != "SLESS_REGISTRY" && !digestPinned.MatchString(v):
				r.Failf("%s=%s must be pinned by digest (name@sha256:...)", k, v)
			}
		}
	}
	return c, r.Err()
}

// archiveLimits reads the archive limits, which the service and the build
// Job's prepare-context step share (the Job gets them through HelperEnv).
func archiveLimits(r *envconf.Reader) (maxArchive int64, lim archive.Limits) {
	maxArchive = int64(r.Int("SLESS_BUILD_MAX_ARCHIVE_BYTES", 50<<20, 1, 1<<31-1))
	lim.MaxBytes = int64(r.Int("SLESS_BUILD_MAX_UNPACKED_BYTES", 256<<20, 1, 1<<31-1))
	lim.MaxEntries = r.Int("SLESS_BUILD_MAX_ENTRIES", 10000, 1, 1000000)
	return maxArchive, lim
}

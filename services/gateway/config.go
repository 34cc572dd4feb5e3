package main

import (
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/kube5s/sless/pkg/archive"
	"github.com/kube5s/sless/pkg/egress"
	"github.com/kube5s/sless/pkg/envconf"
	"github.com/kube5s/sless/pkg/fncall"
	"github.com/kube5s/sless/pkg/kubeclient"
	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/pkg/service"
	"github.com/kube5s/sless/services/gateway/internal/api"
	"github.com/kube5s/sless/services/gateway/internal/review"
)

type config struct {
	service.Common
	service.Deps
	HTTPAddr         string // SLESS_HTTP_ADDR: the public API
	AdminToken       string // SLESS_ADMIN_TOKEN: manages tenants
	PublicURL        string // SLESS_PUBLIC_URL: base of function URLs
	MigrateOnly      bool   // SLESS_MIGRATE_ONLY: apply migrations and exit (the Helm hook Job)
	S3               objstore.Config
	MaxSourceBytes   int            // SLESS_MAX_SOURCE_BYTES
	MaxResponseBytes int            // SLESS_MAX_RESPONSE_BYTES
	EgressAllow      []netip.Prefix // SLESS_EGRESS_ALLOW_CIDRS: private ranges callback URLs may name
	FunctionsDomain  string         // SLESS_FUNCTIONS_DOMAIN: serve tenant t's triggers on <t>.<domain>
	RecordBuffer     int            // SLESS_RECORD_BUFFER: invocation records waiting to be published
	RecordSync       bool           // SLESS_RECORD_SYNC_INVOCATIONS: record synchronous invocations in the history
	TenantWait       time.Duration  // SLESS_TENANT_WAIT: how long a tenant's create waits for its namespace before 202
	// ArchiveLimits: SLESS_BUILD_MAX_ENTRIES and SLESS_BUILD_MAX_UNPACKED_BYTES,
	// the builder's settings, so that an upload it would refuse is refused at once.
	ArchiveLimits archive.Limits
	// ExecutionDriver (SLESS_EXECUTION_DRIVER, the operator's setting) says
	// where function logs are read: local, the operator's files in
	// FunctionLogDir (SLESS_FUNCTION_LOG_DIR); kubernetes, the pods' logs.
	ExecutionDriver string
	FunctionLogDir  string
	Console         bool            // SLESS_CONSOLE: serve the web console under /ui/
	TraceQueryURL   string          // SLESS_TRACE_QUERY_URL: the trace store's query API (Jaeger) the console draws traces from
	Review          review.Settings // SLESS_REVIEW_*: the source review at upload
}

func loadConfig(getenv func(string) string) (config, error) {
	r := envconf.New(getenv)
	c := config{
		Common:           service.ReadCommon(r, ":9090"),
		Deps:             service.ReadDeps(r, kubeclient.DefaultRate),
		HTTPAddr:         r.String("SLESS_HTTP_ADDR", ":8080"),
		AdminToken:       r.Required("SLESS_ADMIN_TOKEN", "the installation's admin token"),
		PublicURL:        strings.TrimSuffix(r.URL("SLESS_PUBLIC_URL", "http://127.0.0.1:8080", "http", "https"), "/"),
		MigrateOnly:      r.Bool("SLESS_MIGRATE_ONLY", false),
		S3:               objstore.ReadConfig(r),
		MaxSourceBytes:   r.Int("SLESS_MAX_SOURCE_BYTES", 50<<20, 1024, 1<<30),
		MaxResponseBytes: r.Int("SLESS_MAX_RESPONSE_BYTES", fncall.MaxResponseBytes, 1024, 1<<30),
		FunctionsDomain:  strings.Trim(strings.ToLower(r.String("SLESS_FUNCTIONS_DOMAIN", "")), "."),
		RecordBuffer:     r.Int("SLESS_RECORD_BUFFER", 10000, 1, 1000000),
		RecordSync:       r.Bool("SLESS_RECORD_SYNC_INVOCATIONS", true),
		TenantWait:       r.Duration("SLESS_TENANT_WAIT", api.DefaultTenantWait),
		ExecutionDriver:  r.OneOf("SLESS_EXECUTION_DRIVER", "local", "local", "kubernetes"),
		FunctionLogDir:   r.String("SLESS_FUNCTION_LOG_DIR", os.TempDir()),
		Console:          r.Bool("SLESS_CONSOLE", true),
		TraceQueryURL:    strings.TrimSuffix(r.String("SLESS_TRACE_QUERY_URL", ""), "/"),
		ArchiveLimits: archive.Limits{
			MaxEntries: r.Int("SLESS_BUILD_MAX_ENTRIES", archive.DefaultLimits.MaxEntries, 1, 1000000),
			MaxBytes:   int64(r.Int("SLESS_BUILD_MAX_UNPACKED_BYTES", int(archive.DefaultLimits.MaxBytes), 1, 1<<31-1)),
		},
	}
	c.EgressAllow = egress.ReadAllow(r)
	c.Review = review.ReadSettings(r)
	if c.MigrateOnly {
		return c, nil // only the database is needed
	}
	if c.AdminToken != "" && len(c.AdminToken) < 32 {
		r.Failf("SLESS_ADMIN_TOKEN must be at least 32 characters")
	}
	return c, r.Err()
}

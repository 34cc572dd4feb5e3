// Package api is the gateway's public HTTP surface: the REST API v1 (huma
// on chi, with the OpenAPI document generated from the operations; every
// operation is in routes.go), thin handlers that authorize, call and map,
// and the one error writer (errors.go). Tokens and rate limits are in
// auth, forwarding to functions in proxy, the async accept and the
// dead-letter replay in enqueue, invocation records in record, SQL in
// store. Each handler's collaborators are small interfaces declared beside
// it; New builds the concrete ones.
package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humachi"
	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/archive"
	"github.com/kube5s/sless/pkg/egress"
	"github.com/kube5s/sless/pkg/loadreport"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/telemetry"
	"github.com/kube5s/sless/pkg/wake"
	"github.com/kube5s/sless/services/gateway/internal/auth"
	"github.com/kube5s/sless/services/gateway/internal/enqueue"
	"github.com/kube5s/sless/services/gateway/internal/logs"
	"github.com/kube5s/sless/services/gateway/internal/proxy"
	"github.com/kube5s/sless/services/gateway/internal/record"
	"github.com/kube5s/sless/services/gateway/internal/review"
	"github.com/kube5s/sless/services/gateway/internal/store"
)

// Publisher sends a message and returns once the broker confirmed it.
type Publisher interface {
	PublishMessage(ctx context.Context, m msg.Message) error
}

// Config is what the API needs to know about the installation.
type Config struct {
	AdminToken       string
	PublicURL        string
	MaxSourceBytes   int64
	MaxResponseBytes int64
	MaxInlineResult  int
	// Egress decides which callback hosts are acceptable (public ones, and
	// the ranges the platform team allowed); nil allows public ones only.
	Egress *egress.Policy
	// FunctionsDomain, when set, serves the public triggers of tenant t on
	// the host <t>.<FunctionsDomain>, an origin of its own: there the
	// function's origin-wide headers (cookies, HSTS, ...) pass.
	FunctionsDomain string
	// ArchiveLimits are the builder's limits, applied at upload.
	ArchiveLimits archive.Limits
	// TenantWait is how long a tenant's create waits for its namespace
	// before it answers 202; 0 means DefaultTenantWait.
	TenantWait time.Duration
	// ReadTimeout is the HTTP server's read timeout (proxy.Forwarder's).
	ReadTimeout time.Duration
}

// Objects is the object store as the API uses it (objstore.Store):
// uploaded sources, build logs, stored results and dead letters' requests.
type Objects interface {
	Exists(ctx context.Context, key string) (bool, error)
	Put(ctx context.Context, key string, r io.Reader, size int64, contentType string) error
	Get(ctx context.Context, key string) (io.ReadCloser, int64, error)
	GetFrom(ctx context.Context, key string, offset int64) (io.ReadCloser, error)
}

// Deps are the gateway's collaborators.
type Deps struct {
	Config    Config
	Kube      client.Client // direct reads and writes of the custom resources
	Cache     cache.Cache   // watch cache of Functions, Triggers, Tenants and tenant Namespaces (tenantns.Watch)
	DB        *pgxpool.Pool // tokens, callback secrets, and the SQL of store
	Store     Objects
	Publisher Publisher
	Recorder  proxy.Recorder
	Health    http.Handler // liveness
	Registry  *prometheus.Registry
	Tracer    trace.Tracer
	Log       *slog.Logger
	Transport http.RoundTripper
	Logs      logs.Source         // what functions printed; nil: the logs route answers 501
	Review    *review.Gate        // the source review at upload; nil: none
	Load      *loadreport.Tracker // calls in flight per version, for the scaler; nil: not counted
	Wake      *wake.Waker         // holds calls for versions at zero; nil: they answer 503
}

// Server holds the handlers' state. Each collaborator is the small
// interface its handlers need, declared beside them; New builds the
// concrete ones from Deps.
type Server struct {
	Deps
	tokens    tokenChecker                // auth.Tokens
	issuer    tokenIssuer                 // auth.Tokens
	listen    func(context.Context) error // auth.Tokens.Listen, for WatchRevocations
	uses      func(context.Context) error // auth.Tokens.RecordUses, for RecordTokenUses
	limits    rateLimiter                 // auth.Limiter
	guesses   guessCounter                // auth.Failures
	forwarder Forwarder                   // proxy.Forwarder: sync invoke and public triggers
	async     asyncQueue                  // enqueue.Acceptor: async invoke with its Idempotency-Key
	replays   replayer                    // enqueue.Replayer: dead-letter replay
	kept      keptReplayer                // enqueue.Replayer: kept requests
	history   historyStore                // store.Store
	letters   deadLetterStore             // store.Store
	functions toolscache.Indexer          // the watch cache's store of Functions (nil: read through Cache)
	tenants   toolscache.Indexer          // the same of Tenants
	fnWatch   watcher                     // Functions, for ?wait=ready and a create's wait for the cache
	nsWatch   watcher                     // tenant Namespaces, for a tenant's create
	loaded    func() bool                 // whether the watch cache of Functions and Triggers has synced
	streams   *prometheus.GaugeVec        // waits and log follows in flight
	long      longRequests                // the same per tenant, to bound them
	routes    map[string]*routeEntry      // the route table, by operation id
	prop      propagation.TextMapPropagator
	telemetry *telemetry.Server // the request telemetry of the router's middleware and of serveInvoke
	router    chi.Router
	api       huma.API
}

// New builds the router with every route of the REST API v1.
func New(d Deps) *Server {
	installErrors()
	s := &Server{Deps: d, prop: telemetry.Propagator()}
	metrics := record.NewMetrics(d.Registry)
	sql := store.New(d.DB)
	tokens := auth.NewTokens(d.DB, 30*time.Second, d.Log)
	s.tokens, s.issuer, s.listen = tokens, tokens, tokens.Listen
	s.uses = func(ctx context.Context) error { return tokens.RecordUses(ctx, auth.UseFlush) }
	s.limits = auth.NewLimiter(s.tenantRate)
	s.guesses = auth.NewFailures(auth.FailedLookupsPerSecond, auth.FailedLookupsBurst)
	if s.Transport == nil {
		s.Transport = proxy.DefaultTransport()
	}
	s.forwarder = &proxy.Forwarder{Transport: s.Transport, Tracer: d.Tracer, Prop: s.prop, Recorder: d.Recorder, Metrics: metrics,
		Log: d.Log, MaxResponseBytes: d.Config.MaxResponseBytes, MaxInlineResult: d.Config.MaxInlineResult, Load: d.Load, Wake: d.Wake, Keep: d.Store, ReadTimeout: d.Config.ReadTimeout}
	s.async = enqueue.NewAcceptor(sql, d.Publisher, metrics)
	replays := enqueue.NewReplayer(sql, d.Store, d.Publisher)
	s.replays, s.kept = replays, replays
	s.history, s.letters = sql, sql

	var err error
	if s.fnWatch, err = watchObjects(d.Cache, &slessv1.Function{}); err != nil {
		panic(fmt.Sprintf("watch functions: %v", err)) // the cache was built with a Function informer; a programming error
	}
	if s.nsWatch, err = watchObjects(d.Cache, &corev1.Namespace{}); err != nil {
		panic(fmt.Sprintf("watch namespaces: %v", err)) // the cache was built with a Namespace informer; a programming error
	}
	if s.functions, err = storeOf(d.Cache, &slessv1.Function{}); err != nil {
		panic(fmt.Sprintf("watch functions: %v", err)) // as above
	}
	if s.tenants, err = storeOf(d.Cache, &slessv1.Tenant{}); err != nil {
		panic(fmt.Sprintf("watch tenants: %v", err)) // the cache was built with a Tenant informer; as above
	}
	if s.loaded, err = cacheSynced(d.Cache, &slessv1.Function{}, &slessv1.Trigger{}); err != nil {
		panic(fmt.Sprintf("watch functions and triggers: %v", err)) // as above
	}
	s.streams = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sless_gateway_long_requests",
		Help: "Requests that wait or stream in flight: kind wait (a function's wait=ready) or logs (a followed log)."}, []string{"kind"})
	if d.Registry != nil {
		d.Registry.MustRegister(s.streams)
	}

	r := chi.NewRouter()
	s.telemetry = &telemetry.Server{Tracer: d.Tracer, Prop: s.prop, Metrics: telemetry.NewHTTPMetrics(d.Registry, "gateway")}
	r.Use(s.requestID)
	r.Use(s.telemetry.Middleware(routePattern))
	r.Use(s.recoverPanics) // inside telemetry: a panic is counted and traced as its 500
	// Liveness only: /readyz (which names the failing dependency), /metrics
	// (every tenant's traffic) and any debug handler are on the ops port.
	r.Use(s.authenticateFirst)
	r.NotFound(s.noRoute)
	r.MethodNotAllowed(s.wrongMethod)
	for _, rr := range s.rawRoutes() {
		r.Method(rr.Method, rr.Path, rr.Handler)
	}

	cfg := huma.Config{
		OpenAPI: &huma.OpenAPI{
			OpenAPI: "3.1.0",
			Info: &huma.Info{Title: "sless", Version: "v1",
				Description: "Functions as a service for Kubernetes: tenants, functions, triggers, jobs, invocations and builds."},
			Components: &huma.Components{
				Schemas: huma.NewMapRegistry("#/components/schemas/", huma.DefaultSchemaNamer),
				SecuritySchemes: map[string]*huma.SecurityScheme{
					"bearer": {Type: "http", Scheme: "bearer", Description: "The admin token or a tenant token"},
				},
			},
			Security: []map[string][]string{{"bearer": {}}},
		},
		OpenAPIPath:   "/openapi",
		Formats:       huma.DefaultFormats,
		DefaultFormat: "application/json",
	}
	s.router = r
	s.api = humachi.New(r, cfg)
	s.registerTenants()
	s.registerBroker()
	s.registerFunctions()
	s.registerVersions()
	s.registerSource()
	s.registerLogs()
	s.registerTriggers()
	s.registerJobs()
	s.registerHistory()
	s.registerResults()
	s.registerDeadLetters()
	s.registerReplay()
	s.documentInvoke()
	s.registerCallbackSecret()
	s.checkRoutes()
	s.documentCreates()
	s.documentTenantCreate()
	return s
}

// ServeHTTP implements http.Handler. A request to a tenant's own host
// (<tenant>.<FunctionsDomain>) is a call of that tenant's public triggers,
// whatever its path: the API is not served there.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if tenant, ok := s.tenantHost(r.Host); ok {
		r2 := new(http.Request)
		*r2 = *r
		u := *r.URL
		u.Path, u.RawPath = "/fn/"+tenant+r.URL.Path, ""
		r2.URL = &u
		r = r2.WithContext(context.WithValue(r.Context(), keyOwnHost, true))
	} else if tenant, name, ok := invokeTarget(r); ok {
		s.serveInvoke(w, r, tenant, name)
		return
	}
	s.router.ServeHTTP(w, r)
}

// tenantHost returns the tenant whose own host h is.
func (s *Server) tenantHost(h string) (string, bool) {
	if s.Config.FunctionsDomain == "" {
		return "", false
	}
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	label, ok := strings.CutSuffix(strings.ToLower(h), "."+s.Config.FunctionsDomain)
	if !ok || len(validation.IsDNS1123Label(label)) > 0 {
		return "", false
	}
	return label, true
}

// OpenAPI is the generated document.
func (s *Server) OpenAPI() *huma.OpenAPI { return s.api.OpenAPI() }

// Router is the mounted router, for tests that compare it with the document.
func (s *Server) Router() chi.Router { return s.router }

func routePattern(r *http.Request) string {
	if rc := chi.RouteContext(r.Context()); rc != nil {
		return rc.RoutePattern()
	}
	return ""
}

type ctxKey int

const (
	keyCall      ctxKey = iota // *call, set by requestID
	keyPrincipal               // principal, set by ServeAs before the router
	keyOwnHost                 // bool, set by ServeHTTP before the router
)

// call is what the middleware learn about one request, kept in one
// context value: every further value or request copy would cost each
// call of a function an allocation (the sync invoke budget,
// docs/benchmarks.md).
type call struct {
	id  string
	log *slog.Logger
	// r is the request as the middleware last saw it: authenticate reads
	// its Authorization header and peer address.
	r         *http.Request
	principal principal
	authed    bool      // principal is set
	ownHost   bool      // the request came to the tenant's own host (ServeHTTP)
	idValue   [1]string // X-Request-Id's value, set without a slice of its own
}

// requestID gives every request an id, in the response and in errors,
// and the context its call.
func (s *Server) requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := &call{}
		ctx := r.Context()
		// Read here, where the context is short: the console's caller
		// (ServeAs) and the tenant's own host (ServeHTTP).
		c.principal, c.authed = ctx.Value(keyPrincipal).(principal)
		c.ownHost, _ = ctx.Value(keyOwnHost).(bool)
		s.identify(c, w, r)
		r = r.WithContext(context.WithValue(ctx, keyCall, c))
		c.r = r
		next.ServeHTTP(w, r)
	})
}

// identify gives c the request's id (the caller's X-Request-Id when it is
// usable) and says it in the response.
func (s *Server) identify(c *call, w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("X-Request-Id")
	if id == "" || len(id) > 128 || strings.ContainsAny(id, "\r\n") {
		id = newID(8)
	}
	c.id, c.log = id, s.Log
	c.idValue[0] = id
	w.Header()["X-Request-Id"] = c.idValue[:]
}

// invokePattern is the invoke route's pattern: the router's, and the
// route name serveInvoke gives its requests' metrics and spans.
const invokePattern = "/v1/tenants/{t}/functions/{name}/invoke"

// invokeTarget reads the tenant and function name of a POST to the invoke
// route whose path is plain (nothing escaped, no empty or extra segment);
// the router serves every other request, these included when not plain.
func invokeTarget(r *http.Request) (tenant, name string, ok bool) {
	if r.Method != http.MethodPost || r.URL.RawPath != "" {
		return "", "", false
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/tenants/")
	if !ok {
		return "", "", false
	}
	tenant, rest, ok = strings.Cut(rest, "/")
	if !ok || tenant == "" {
		return "", "", false
	}
	if rest, ok = strings.CutPrefix(rest, "functions/"); !ok {
		return "", "", false
	}
	if name, ok = strings.CutSuffix(rest, "/invoke"); !ok || name == "" || strings.Contains(name, "/") {
		return "", "", false
	}
	return tenant, name, true
}

// invocation is what the router's middleware keep of one request (the
// call, the telemetry), in one allocation for the invoke route.
type invocation struct {
	call call
	tel  telemetry.Exchange
}

// serveInvoke serves the invoke route as the router would (requestID,
// the telemetry, recoverPanics, authenticateFirst, invoke), without the
// router: every call of a function pays the middleware's request copies,
// contexts and route lookup otherwise (the sync invoke budget,
// docs/benchmarks.md). invoke authorizes before anything reads the body,
// as authenticateFirst would.
func (s *Server) serveInvoke(w http.ResponseWriter, r *http.Request, tenant, name string) {
	v := &invocation{}
	s.identify(&v.call, w, r)
	ctx, w := s.telemetry.Begin(&v.tel, w, r)
	defer v.tel.Close()
	r = r.WithContext(context.WithValue(ctx, keyCall, &v.call))
	v.call.r = r
	s.invokeRecovered(w, r, tenant, name)
	s.telemetry.End(&v.tel, invokePattern)
}

// invokeRecovered is invokeFunction inside recoverPanics: a panic is the
// error writer's 500, which End then counts.
func (s *Server) invokeRecovered(w http.ResponseWriter, r *http.Request, tenant, name string) {
	defer s.recovered(w, r)
	s.invokeFunction(w, r, tenant, name)
}

func callOf(ctx context.Context) *call {
	c, _ := ctx.Value(keyCall).(*call)
	return c
}

// RequestID returns the request id of ctx.
func RequestID(ctx context.Context) string {
	if c := callOf(ctx); c != nil {
		return c.id
	}
	return ""
}

// logOf is the logger of the request of ctx, for problemOf, which huma
// calls without the server at hand.
func logOf(ctx context.Context) *slog.Logger {
	if c := callOf(ctx); c != nil && c.log != nil {
		return c.log
	}
	return slog.Default() // outside a request: nothing else to log to
}

func newID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// WatchRevocations applies token revocations made through other gateway
// replicas at once (PostgreSQL LISTEN); run it beside the server.
func (s *Server) WatchRevocations(ctx context.Context) error { return s.listen(ctx) }

// Settle waits for what calls left running after their answers (the
// uploads of kept requests, whose records come last); call it once the
// servers stopped, before the Recorder drains.
func (s *Server) Settle() { s.forwarder.Settle() }

// RecordTokenUses writes the tokens' last use (GET .../tokens shows it)
// every auth.UseFlush until ctx ends, and once more then.
func (s *Server) RecordTokenUses(ctx context.Context) error { return s.uses(ctx) }

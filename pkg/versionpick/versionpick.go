// Package versionpick is the one owner of "which version of a function
// serves this call", for the gateway (synchronous calls, public triggers,
// async acceptance) and the invoker (pinned work). It reads only
// Function.status.serving and status.latestVersion, which the operator
// writes; a function from before versions (status.serving empty) is
// served from status.endpoint as version 0 (unknown).
//
// The order of the decision (docs/versions.md):
//   - an explicit route (@tag or @N in the invoke route's function name,
//     ?version= on invoke, the X-Sless-Route header) names one serving
//     version: unknown -> 404, not ready -> 503 with Retry-After;
//   - otherwise a weighted pick over the serving percents, among the ready
//     versions with traffic; random per call, or deterministic for a key
//     (X-Sless-Affinity, else Idempotency-Key); none ready -> 503.
//
// A version the scaler took to zero (status.serving[].idle) is as good as
// a ready one here: the choice says Wake, and the caller waits for it
// with pkg/wake before it calls.
//
// Pinned work (async calls, queue messages, cron fires, job runs) runs on
// the version stamped at acceptance while it is in status.serving
// (draining included); otherwise on latest, with Fallback set.
package versionpick

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/headers"
)

// RetryAfter is the Retry-After (seconds) of a 503 for an unready version.
const RetryAfter = 1

// Choice is the version a call runs on.
type Choice struct {
	// Number is the version; 0 for a function from before versions.
	Number int32
	// Endpoint is where the version is reached (http://host:port).
	Endpoint string
	// Replicas says where the call may go within the version and how full
	// it may get (pkg/wake's Take spreads calls over them).
	Replicas Replicas
	// Fallback: the pinned version was no longer serving, so the call runs
	// on latest (or on the split when latest does not serve).
	Fallback bool
	// Wake: the version is idle (at zero replicas, or on its way there);
	// the call waits for it to wake (pkg/wake) before it is sent.
	Wake bool
}

// Replicas are what the data plane knows of a version's replicas from
// status.serving.
type Replicas struct {
	// Endpoints are the ready replicas' own addresses when the data plane
	// spreads calls over them; empty: Endpoint spreads them (a Service).
	Endpoints []string
	// Ready and Max are the ready replicas and the most the scaler may run
	// (0: not said, as by an operator from before scaling: none more).
	Ready, Max int32
}

// CanGrow tells whether the scaler may still add replicas to the version.
func (r Replicas) CanGrow() bool { return r.Ready < r.Max }

// Error is a call that no version can serve: its HTTP status (404 or
// 503), the detail for the caller and, for a 503, Retry-After.
type Error struct {
	Status     int
	Detail     string
	RetryAfter int
}

func (e *Error) Error() string { return e.Detail }

func notFound(format string, args ...any) *Error {
	return &Error{Status: http.StatusNotFound, Detail: fmt.Sprintf(format, args...)}
}

func unready(format string, args ...any) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Detail: fmt.Sprintf(format, args...), RetryAfter: RetryAfter}
}

// Route is an explicit route: a tag or a version number; the zero Route
// is none (the split decides).
type Route struct {
	Tag    string
	Number int32
}

// IsZero tells whether the route names nothing.
func (r Route) IsZero() bool { return r.Tag == "" && r.Number == 0 }

func (r Route) String() string {
	if r.Tag != "" {
		return r.Tag
	}
	return strconv.Itoa(int(r.Number))
}

// ParseRoute reads a route: "7" or "v7" is version 7, anything else a tag
// (a DNS-1123 label, as spec.traffic's tags are). "" is no route.
func ParseRoute(s string) (Route, error) {
	if s == "" {
		return Route{}, nil
	}
	digits := strings.TrimPrefix(s, "v")
	if digits != "" && strings.Trim(digits, "0123456789") == "" {
		n, err := strconv.ParseInt(digits, 10, 32)
		if err != nil || n < 1 {
			return Route{}, fmt.Errorf("version %q is not a number from 1", s)
		}
		return Route{Number: int32(n)}, nil
	}
	if msgs := validation.IsDNS1123Label(s); len(msgs) > 0 || len(s) > 40 {
		return Route{}, fmt.Errorf("%q is neither a version number nor a tag (a lower-case DNS label of at most 40 characters)", s)
	}
	return Route{Tag: s}, nil
}

// SplitName splits the function name of the invoke route: "hello@canary"
// is function hello on tag canary, "hello@7" on version 7, "hello" no
// route.
func SplitName(s string) (string, Route, error) {
	name, at, found := strings.Cut(s, "@")
	if !found {
		return s, Route{}, nil
	}
	if at == "" {
		return name, Route{}, fmt.Errorf("%q: a tag or version number must follow @", s)
	}
	r, err := ParseRoute(at)
	return name, r, err
}

// Key is the key of a deterministic pick of a request: X-Sless-Affinity,
// else Idempotency-Key, else "" (random).
func Key(h http.Header) string {
	if k := h.Get(headers.Affinity); k != "" {
		return k
	}
	return h.Get("Idempotency-Key")
}

// Versioned tells whether a function has versions serving (status.serving
// set); a function without them is served from status.endpoint.
func Versioned(fn *slessv1.Function) bool { return len(fn.Status.Serving) > 0 }

// Pick chooses the version of one call: by route when one is given,
// otherwise by the split (key "" is random).
func Pick(fn *slessv1.Function, route Route, key string) (Choice, error) {
	if !Versioned(fn) {
		return legacy(fn, route)
	}
	if !route.IsZero() {
		sv := find(fn, route)
		if sv == nil {
			if route.Tag != "" {
				return Choice{}, notFound("function %s has no tag %s", fn.Name, route.Tag)
			}
			return Choice{}, notFound("function %s has no version %d serving", fn.Name, route.Number)
		}
		if !usable(sv) {
			return Choice{}, unready("version %d of function %s is not ready yet; try again shortly", sv.Number, fn.Name)
		}
		return choose(sv), nil
	}
	return split(fn, key)
}

// Pinned chooses the version of pinned work stamped with version n (0:
// not stamped, which is picked as a new call with key). A version no
// longer in status.serving runs on latest, with Fallback set.
func Pinned(fn *slessv1.Function, n int32, key string) (Choice, error) {
	if n == 0 || !Versioned(fn) {
		c, err := Pick(fn, Route{}, key)
		// Stamped on a version while the function has none serving (its
		// serving list was emptied): what runs is not that version.
		c.Fallback = n != 0 && err == nil && c.Number != n
		return c, err
	}
	if sv := find(fn, Route{Number: n}); sv != nil {
		if !usable(sv) {
			return Choice{}, unready("version %d of function %s is not ready yet", n, fn.Name)
		}
		return choose(sv), nil
	}
	if sv := find(fn, Route{Number: fn.Status.LatestVersion}); sv != nil && usable(sv) {
		c := choose(sv)
		c.Fallback = true
		return c, nil
	}
	// Latest does not serve (a rollback below it): the split decides.
	c, err := split(fn, key)
	c.Fallback = err == nil
	return c, err
}

// legacy serves a function without status.serving from status.endpoint.
func legacy(fn *slessv1.Function, route Route) (Choice, error) {
	if !route.IsZero() && !(route.Number != 0 && route.Number == fn.Status.LatestVersion) {
		return Choice{}, notFound("function %s has no version %s serving", fn.Name, route)
	}
	if !fn.IsReady() {
		return Choice{}, unready("function %s is %s; try again shortly", fn.Name, strings.ToLower(string(fn.Phase())))
	}
	return Choice{Number: fn.Status.LatestVersion, Endpoint: fn.Status.Endpoint}, nil
}

// usable tells whether a serving version can take a call: ready with an
// endpoint, or idle (woken by the call).
func usable(sv *slessv1.ServingVersion) bool {
	return sv.Endpoint != "" && (sv.Ready || sv.Idle)
}

func choose(sv *slessv1.ServingVersion) Choice {
	return Choice{Number: sv.Number, Endpoint: sv.Endpoint, Wake: sv.Idle,
		Replicas: Replicas{Endpoints: sv.Endpoints, Ready: sv.ReadyReplicas, Max: sv.MaxReplicas}}
}

// Serving is the choice of serving version n of fn as its status says
// now, and false when n no longer serves: what a call held for the
// version (waking, or every replica full) looks at again.
func Serving(fn *slessv1.Function, n int32) (Choice, bool) {
	sv := find(fn, Route{Number: n})
	if sv == nil {
		return Choice{}, false
	}
	return choose(sv), true
}

func find(fn *slessv1.Function, route Route) *slessv1.ServingVersion {
	for i := range fn.Status.Serving {
		sv := &fn.Status.Serving[i]
		if route.Number != 0 && sv.Number == route.Number {
			return sv
		}
		if route.Tag != "" {
			for _, t := range sv.Tags {
				if t == route.Tag {
					return sv
				}
			}
		}
	}
	return nil
}

// split picks over the usable versions with traffic, weighted by percent.
// With no version carrying traffic (every percent 0), latest serves.
func split(fn *slessv1.Function, key string) (Choice, error) {
	total, withTraffic := 0, 0
	for _, sv := range fn.Status.Serving {
		if sv.Percent > 0 {
			withTraffic++
			if usable(&sv) {
				total += int(sv.Percent)
			}
		}
	}
	if withTraffic == 0 {
		if sv := find(fn, Route{Number: fn.Status.LatestVersion}); sv != nil && usable(sv) {
			return choose(sv), nil
		}
		return Choice{}, unready("function %s has no version taking traffic yet; try again shortly", fn.Name)
	}
	if total == 0 {
		return Choice{}, unready("no version of function %s is ready yet; try again shortly", fn.Name)
	}
	var at int
	if key == "" {
		at = rand.IntN(total)
	} else {
		h := fnv.New64a()
		h.Write([]byte(key))
		at = int(h.Sum64() % uint64(total))
	}
	for i := range fn.Status.Serving {
		sv := &fn.Status.Serving[i]
		if sv.Percent <= 0 || !usable(sv) {
			continue
		}
		if at < int(sv.Percent) {
			return choose(sv), nil
		}
		at -= int(sv.Percent)
	}
	panic("versionpick: weighted pick fell off the end") // unreachable: at < total
}

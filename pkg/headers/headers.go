// Package headers names the platform's own HTTP headers (X-Sless-*), once
// for the services, the CLI and the tests, and tells HTTP's standard
// methods from made-up ones. The function's side of them is
// written down in runtimes/README.md; the API's in the OpenAPI document.
package headers

import "net/http"

// The function contract: what a function is sent and answers.
const (
	// InvocationID is the invocation's id: sent to the function, and on
	// every answer of a synchronous invocation to its caller.
	InvocationID = "X-Sless-Invocation-Id"
	// Trigger is the kind of trigger that caused the invocation
	// (msg.TriggerKind), sent to the function.
	Trigger = "X-Sless-Trigger"
	// ColdStart is "true" on the first answer a runtime process gives;
	// recorded as the invocation's cold_start, never passed on.
	ColdStart = "X-Sless-Cold-Start"
	// Queue, RoutingKey and MessageID carry a queue trigger's message
	// properties to the function.
	Queue      = "X-Sless-Queue"
	RoutingKey = "X-Sless-Routing-Key"
	MessageID  = "X-Sless-Message-Id"
)

// The API's.
const (
	// Signature signs a callback: "t=<unix seconds>,v1=<hex HMAC-SHA256>"
	// (pkg/callback).
	Signature = "X-Sless-Signature"
	// Wait says how a GET of a function with wait=ready ended. The API
	// declares it in a struct tag (a literal there), which the gateway's
	// OpenAPI test holds to this name.
	Wait = "X-Sless-Wait"

	// Version is the number of the function version that answered: on
	// every answer of a function (pkg/versionpick); absent for a function
	// from before versions.
	Version = "X-Sless-Version"
	// Route names the tag or version number ("canary", "7") a call is
	// routed to, on invoke and on public triggers; never passed on.
	Route = "X-Sless-Route"
	// Affinity keys the split pick of a call: calls with the same value
	// reach the same version while the split holds; never passed on.
	Affinity = "X-Sless-Affinity"
)

// StandardMethod tells whether m is one of the methods of RFC 9110. Any
// other is a name the caller made up: the platform passes it on, but
// neither parses a request of it ahead (http.NewRequestWithContext checks
// it) nor makes a metric label of it.
func StandardMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete,
		http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return true
	}
	return false
}

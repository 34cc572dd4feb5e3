package ui

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"sort"
	"strings"

	"github.com/kube5s/sless/services/gateway/internal/api"
)

// keptRequest reads the request an invocation kept, for the page's
// "replay with edits" form; the error is what to say when there is none.
func (h *Handler) keptRequest(r *http.Request, s Session, inv api.Invocation) (*api.KeptRequest, string) {
	if !inv.RequestKept {
		return nil, "Only invocations that did not succeed keep their request. Invoke the function again from its page."
	}
	var k api.KeptRequest
	if err := h.get(r, s, tenantPath(s, "invocations", inv.ID, "request"), nil, &k); err != nil {
		var e *apiError
		if errors.As(err, &e) {
			return nil, "The kept request cannot be read: " + e.Detail
		}
		return nil, "The kept request cannot be read."
	}
	return &k, ""
}

// headerLines is a header map as the panel's "Name: value" lines, sorted.
func headerLines(h map[string][]string) string {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, k := range names {
		for _, v := range h[k] {
			b.WriteString(k + ": " + v + "\n")
		}
	}
	return b.String()
}

// replayInvocation runs an invocation's kept request again
// (POST .../invocations/{id}/replay), as kept or with the form's edits,
// then shows the invocation with a link to its replay.
func (h *Handler) replayInvocation(w http.ResponseWriter, r *http.Request, s Session) {
	id := r.PathValue("id")
	if err := r.ParseForm(); err != nil {
		h.fail(w, r, s, &apiError{Status: http.StatusBadRequest, Detail: "the form cannot be read"})
		return
	}
	var body []byte
	if r.PostForm.Get("edit") != "" {
		hdr, err := parseHeaders(r.PostForm.Get("headers"))
		if err != nil {
			h.fail(w, r, s, &apiError{Status: http.StatusUnprocessableEntity, Detail: err.Error()})
			return
		}
		method, path, query, text := r.PostForm.Get("method"), r.PostForm.Get("path"), r.PostForm.Get("query"), r.PostForm.Get("body")
		edits := api.ReplayEdits{Method: &method, Path: &path, Query: &query, Headers: map[string][]string(hdr), Body: &text,
			BodyBase64: r.PostForm.Get("body_base64") != ""}
		if body, err = json.Marshal(edits); err != nil {
			h.fail(w, r, s, err)
			return
		}
	}
	res := h.call(r, s, http.MethodPost, tenantPath(s, "invocations", id, "replay"), nil, body, http.Header{"Content-Type": {"application/json"}}, 1<<20)
	if res.Status/100 != 2 {
		h.fail(w, r, s, problemOf(res))
		return
	}
	var out api.ReplayAccepted
	if err := json.Unmarshal(res.Body, &out); err != nil || !plainID(out.InvocationID) {
		h.fail(w, r, s, &apiError{Status: http.StatusBadGateway, Detail: "the replay was queued, but its answer cannot be read"})
		return
	}
	http.Redirect(w, r, "/ui/invocations/"+url.PathEscape(id)+"?"+url.Values{"replayed": {out.InvocationID}}.Encode(), http.StatusSeeOther)
}

// plainID tells whether s can be an invocation id: what a link shows
// from a query parameter, so nothing else.
func plainID(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':') {
			return false
		}
	}
	return true
}

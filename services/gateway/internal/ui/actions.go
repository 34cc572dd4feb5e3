package ui

import (
	"net/http"
	"net/url"
)

// Actions of the function page: each is a POST that calls one operation
// of the REST API as the session's tenant, then redirects back (the
// page shows the new state), or shows the API's refusal.

// setTriggerEnabled enables or disables a trigger of the function
// (PATCH .../triggers/{name} with {"enabled": ...}).
func (h *Handler) setTriggerEnabled(w http.ResponseWriter, r *http.Request, s Session) {
	fn, name := r.PathValue("name"), r.PathValue("trigger")
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	if err := r.ParseForm(); err != nil {
		h.fail(w, r, s, &apiError{Status: http.StatusBadRequest, Detail: "the form could not be read"})
		return
	}
	var body string
	switch r.PostForm.Get("enabled") {
	case "true":
		body = `{"enabled":true}`
	case "false":
		body = `{"enabled":false}`
	default:
		h.fail(w, r, s, &apiError{Status: http.StatusUnprocessableEntity, Detail: "enabled must be true or false"})
		return
	}
	// The trigger must be this function's: the page offers no other.
	var t struct {
		Function string `json:"function"`
	}
	if err := h.get(r, s, tenantPath(s, "triggers", name), nil, &t); err != nil {
		h.fail(w, r, s, err)
		return
	}
	if t.Function != fn {
		h.fail(w, r, s, &apiError{Status: http.StatusNotFound, Detail: "function " + fn + " has no trigger " + name})
		return
	}
	res := h.call(r, s, http.MethodPatch, tenantPath(s, "triggers", name), nil, []byte(body),
		http.Header{"Content-Type": {"application/merge-patch+json"}}, 1<<20)
	if res.Status/100 != 2 {
		h.fail(w, r, s, problemOf(res))
		return
	}
	http.Redirect(w, r, "/ui/functions/"+url.PathEscape(fn)+"#triggers-h", http.StatusSeeOther)
}

// runJob starts a new run of a job of the function (POST .../jobs/{name}/run).
func (h *Handler) runJob(w http.ResponseWriter, r *http.Request, s Session) {
	fn, name := r.PathValue("name"), r.PathValue("job")
	var j struct {
		Function string `json:"function"`
	}
	if err := h.get(r, s, tenantPath(s, "jobs", name), nil, &j); err != nil {
		h.fail(w, r, s, err)
		return
	}
	if j.Function != fn {
		h.fail(w, r, s, &apiError{Status: http.StatusNotFound, Detail: "function " + fn + " has no job " + name})
		return
	}
	res := h.call(r, s, http.MethodPost, tenantPath(s, "jobs", name, "run"), nil, nil, nil, 1<<20)
	if res.Status/100 != 2 {
		h.fail(w, r, s, problemOf(res))
		return
	}
	http.Redirect(w, r, "/ui/functions/"+url.PathEscape(fn)+"#jobs-h", http.StatusSeeOther)
}

package ui

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/kube5s/sless/services/gateway/internal/api"
)

type deadLettersView struct {
	Items           []api.DeadLetter
	Next            string
	Error           string
	Function        string
	Replayed        string
	ReplayedOptions []sinceOpt
}

var replayedOptions = []sinceOpt{{"", "all"}, {"false", "not replayed"}, {"true", "replayed"}}

// deadLetters lists the tenant's dead letters (GET .../dead-letters).
func (h *Handler) deadLetters(w http.ResponseWriter, r *http.Request, s Session) {
	in := r.URL.Query()
	v := deadLettersView{Function: in.Get("function"), Replayed: in.Get("replayed"), ReplayedOptions: replayedOptions}
	q := url.Values{"limit": {"50"}}
	for _, k := range []string{"function", "replayed", "cursor"} {
		if x := in.Get(k); x != "" {
			q.Set(k, x)
		}
	}
	status := http.StatusOK
	var page list[api.DeadLetter]
	err := h.get(r, s, tenantPath(s, "dead-letters"), q, &page)
	var ae *apiError
	switch {
	case errors.As(err, &ae) && ae.Status/100 == 4:
		v.Error, status = ae.Detail, ae.Status
	case err != nil:
		h.fail(w, r, s, err)
		return
	}
	v.Items = page.Items
	if page.NextCursor != "" {
		next := url.Values{"cursor": {page.NextCursor}}
		for _, k := range []string{"function", "replayed"} {
			if x := in.Get(k); x != "" {
				next.Set(k, x)
			}
		}
		v.Next = next.Encode()
	}
	h.render(w, r, status, "deadletters", Page{Title: "Dead letters", Session: &s, Nav: "dead-letters", Data: v})
}

// replayDeadLetter runs a dead letter's request again, once
// (POST .../dead-letters/{id}/replay), then shows the new invocation.
func (h *Handler) replayDeadLetter(w http.ResponseWriter, r *http.Request, s Session) {
	res := h.call(r, s, http.MethodPost, tenantPath(s, "dead-letters", r.PathValue("id"), "replay"), nil, nil, nil, 1<<20)
	if res.Status/100 != 2 {
		h.fail(w, r, s, problemOf(res))
		return
	}
	http.Redirect(w, r, "/ui/dead-letters?replayed=true", http.StatusSeeOther)
}

// maxSelected bounds the dead letters one "Replay the selected" replays.
const maxSelected = 100

// replaySelected replays each selected dead letter once
// (POST .../dead-letters/replay, ids in "id"), then shows the list; the
// first refusal is shown instead, after the ones before it ran.
func (h *Handler) replaySelected(w http.ResponseWriter, r *http.Request, s Session) {
	if err := r.ParseForm(); err != nil {
		h.fail(w, r, s, &apiError{Status: http.StatusBadRequest, Detail: "the form cannot be read"})
		return
	}
	ids := r.PostForm["id"]
	switch {
	case len(ids) == 0:
		h.fail(w, r, s, &apiError{Status: http.StatusUnprocessableEntity, Detail: "select the dead letters to replay"})
		return
	case len(ids) > maxSelected:
		h.fail(w, r, s, &apiError{Status: http.StatusUnprocessableEntity, Detail: fmt.Sprintf("at most %d dead letters are replayed at once", maxSelected)})
		return
	}
	for _, id := range ids {
		res := h.call(r, s, http.MethodPost, tenantPath(s, "dead-letters", id, "replay"), nil, nil, nil, 1<<20)
		if res.Status/100 != 2 {
			h.fail(w, r, s, problemOf(res))
			return
		}
	}
	http.Redirect(w, r, "/ui/dead-letters?replayed=true", http.StatusSeeOther)
}

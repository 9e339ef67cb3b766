package httpapi

import (
	"maps"
	"net/http"
)

// answer is what a handler answers when it succeeds: the status and a body that is a value
// encoded as JSON (the API's answers), bytes already encoded (the flag definitions, the
// schema) or nothing (204, 304, the bare 405). Handlers build it and respond writes it, so
// that every answer gets the same encoding and the errors the same shape.
type answer struct {
	status int
	header http.Header // set before the status is written
	value  any         // encoded as JSON when not nil
	raw    []byte      // written as it is, under the header's Content-Type, when value is nil
}

// handler is a route's handler: what it answers, or the error respond writes in the API's
// error shape. It gets no ResponseWriter, so it cannot write around respond.
type handler func(r *http.Request) (answer, error)

// ok answers 200 with v as JSON.
func ok(v any) answer { return answer{status: http.StatusOK, value: v} }

// created answers 201 with v as JSON.
func created(v any) answer { return answer{status: http.StatusCreated, value: v} }

// noContent answers 204: the deletions.
func noContent() answer { return noBody(http.StatusNoContent) }

// noBody answers the status alone, without a body or a Content-Type.
func noBody(status int) answer { return answer{status: status} }

// encoded answers 200 with a body already encoded, of the given Content-Type.
func encoded(contentType string, body []byte) answer {
	return answer{status: http.StatusOK, raw: body}.with("Content-Type", contentType)
}

// with returns the answer with a header set.
func (a answer) with(key, value string) answer {
	a.header = maps.Clone(a.header)
	if a.header == nil {
		a.header = http.Header{}
	}
	a.header.Set(key, value)
	return a
}

// respond serves a request with h and writes its outcome: the error through writeError, or
// the answer. It is the one writer of the API's answers (TestOnlyRespondWritesJSON holds
// that), as Prometheus' web/api/v1 writes what its apiFuncs return in one place.
func (s *Server) respond(h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		a, err := h(r)
		if err != nil {
			writeError(w, s.cfg.Logger, r, err)
			return
		}
		maps.Copy(w.Header(), a.header)
		if a.value != nil {
			writeJSON(w, a.status, a.value)
			return
		}
		w.WriteHeader(a.status)
		if a.raw != nil {
			_, _ = w.Write(a.raw) // the client went away; nothing to do
		}
	}
}

package httpapi

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/flagedge/flagedge/controlplane"
)

// Page sizes of list endpoints.
const (
	defaultLimit = 100
	maxLimit     = 1000
)

// maxOffset bounds how far a list may be paged: an offset (or page × limit) beyond it is a
// 400 invalid_input rather than clamped, because a clamped offset would answer a different
// page than the one asked for. Offsets near the integer limit used to overflow (a negative
// offset in next, an OFFSET PostgreSQL refuses); a billion rows is far beyond any list here.
const maxOffset = 1_000_000_000

// page is the paginated list envelope.
type page struct {
	Count    int     `json:"count"`
	Next     *string `json:"next"`
	Previous *string `json:"previous"`
	Results  any     `json:"results"`
}

// pageParams reads limit and offset: absent ⇒ the defaults, over the maximum ⇒ clamped,
// negative or not a number ⇒ 400.
func pageParams(r *http.Request) (limit, offset int, err error) {
	q := r.URL.Query()
	limit, err = intParam(q, "limit", defaultLimit)
	if err != nil {
		return 0, 0, err
	}
	if limit == 0 {
		limit = defaultLimit
	}
	limit = min(limit, maxLimit)
	offset, err = intParam(q, "offset", 0)
	if err == nil && offset > maxOffset {
		err = controlplane.FieldError("offset", "invalid_input", fmt.Sprintf("Ensure this value is less than or equal to %d.", maxOffset))
	}
	return limit, offset, err
}

// intParam reads a non-negative integer query parameter.
func intParam(q url.Values, name string, def int) (int, error) {
	raw := q.Get(name)
	if raw == "" {
		return def, nil
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 0 {
		return 0, controlplane.FieldError(name, "invalid_input", "A valid non-negative integer is required.")
	}
	return n, nil
}

// newPage builds the envelope with absolute next/previous links.
func (s *Server) newPage(r *http.Request, count, limit, offset int, results any) page {
	p := page{Count: count, Results: results}
	if offset+limit < count {
		next := s.absoluteURL(r, map[string]string{"limit": strconv.Itoa(limit), "offset": strconv.Itoa(offset + limit)})
		p.Next = &next
	}
	if offset > 0 {
		prev := max(offset-limit, 0)
		params := map[string]string{"limit": strconv.Itoa(limit), "offset": strconv.Itoa(prev)}
		if prev == 0 {
			params["offset"] = ""
		}
		previous := s.absoluteURL(r, params)
		p.Previous = &previous
	}
	return p
}

// absoluteURL is the request's URL with the given query parameters replaced (an empty value
// removes one), the query re-encoded with sorted keys.
func (s *Server) absoluteURL(r *http.Request, set map[string]string) string {
	base := strings.TrimRight(s.cfg.PublicURL, "/")
	if base == "" {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		base = scheme + "://" + r.Host
	}
	q := r.URL.Query()
	for k, v := range set {
		if v == "" {
			q.Del(k)
		} else {
			q.Set(k, v)
		}
	}
	u := base + requestPath(r)
	if enc := q.Encode(); enc != "" {
		u += "?" + enc
	}
	return u
}

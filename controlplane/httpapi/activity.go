package httpapi

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/flagedge/flagedge/controlplane"
)

// Page size of the activity endpoints.
const defaultActivityLimit = 10

// activityPage is the activity endpoints' envelope.
type activityPage struct {
	Results    []activityJSON `json:"results"`
	Next       *string        `json:"next"`
	Previous   *string        `json:"previous"`
	TotalCount int            `json:"total_count"`
}

func (s *Server) handleFlagActivity(r *http.Request, c *call) (answer, error) {
	f, err := s.flagFromPath(r, c)
	if err != nil {
		return answer{}, err
	}
	return s.answerActivity(r, c, strconv.FormatInt(f.ID, 10))
}

func (s *Server) handleAllFlagActivity(r *http.Request, c *call) (answer, error) {
	return s.answerActivity(r, c, "")
}

// answerActivity answers a page of the project's flag activity (of one flag when itemID is
// set), paged by limit and page.
func (s *Server) answerActivity(r *http.Request, c *call, itemID string) (answer, error) {
	q := r.URL.Query()
	limit, err := intParam(q, "limit", defaultActivityLimit)
	if err != nil {
		return answer{}, err
	}
	if limit == 0 {
		limit = defaultActivityLimit
	}
	limit = min(limit, maxLimit)
	pageNum, err := intParam(q, "page", 1)
	if err != nil {
		return answer{}, err
	}
	pageNum = max(pageNum, 1)
	if pageNum-1 > maxOffset/limit {
		return answer{}, controlplane.FieldError("page", "invalid_input", fmt.Sprintf("Ensure this value is less than or equal to %d.", maxOffset/limit+1))
	}
	list, total, err := s.cfg.Activity.FindActivity(r.Context(), controlplane.ActivityFilter{
		ProjectID: c.project.ID, Scope: "FeatureFlag", ItemID: itemID, Limit: limit, Offset: (pageNum - 1) * limit,
	})
	if err != nil {
		return answer{}, err
	}
	out := activityPage{Results: make([]activityJSON, len(list)), TotalCount: total}
	for i, a := range list {
		out.Results[i] = newActivityJSON(a)
	}
	if pageNum*limit < total {
		next := s.absoluteURL(r, map[string]string{"page": strconv.Itoa(pageNum + 1)})
		out.Next = &next
	}
	if pageNum > 1 {
		prev := s.absoluteURL(r, map[string]string{"page": strconv.Itoa(pageNum - 1)})
		out.Previous = &prev
	}
	return ok(out), nil
}

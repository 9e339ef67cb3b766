package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/flagedge/flagedge/controlplane"
)

// annotationJSON is the API's annotation object.
type annotationJSON struct {
	ID                 int64     `json:"id"`
	Content            string    `json:"content"`
	DateMarker         *timeJSON `json:"date_marker"`
	CreationType       string    `json:"creation_type"`
	DashboardItem      *int64    `json:"dashboard_item"`
	DashboardID        *int64    `json:"dashboard_id"`
	DashboardName      *string   `json:"dashboard_name"`
	InsightShortID     *string   `json:"insight_short_id"`
	InsightName        *string   `json:"insight_name"`
	InsightDerivedName *string   `json:"insight_derived_name"`
	CreatedBy          *userJSON `json:"created_by"`
	CreatedAt          timeJSON  `json:"created_at"`
	UpdatedAt          timeJSON  `json:"updated_at"`
	Deleted            bool      `json:"deleted"`
	Scope              string    `json:"scope"`
}

func newAnnotationJSON(a *controlplane.Annotation) annotationJSON {
	out := annotationJSON{ID: a.ID, Content: a.Content, CreationType: a.CreationType, DashboardItem: a.DashboardItem,
		DashboardID: a.DashboardID, CreatedBy: newUserJSON(a.CreatedBy), CreatedAt: timeJSON(a.CreatedAt),
		UpdatedAt: timeJSON(a.UpdatedAt), Deleted: a.Deleted, Scope: a.Scope}
	out.DateMarker = optTime(a.DateMarker)
	return out
}

func (s *Server) handleListAnnotations(r *http.Request, c *call) (answer, error) {
	limit, offset, err := pageParams(r)
	if err != nil {
		return answer{}, err
	}
	q := r.URL.Query()
	f := controlplane.AnnotationFilter{ProjectID: c.project.ID,
		Search: q.Get("search"), Scope: q.Get("scope"), Limit: limit, Offset: offset}
	if raw := q.Get("dashboardItemId"); raw != "" {
		id, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			return answer{}, controlplane.FieldError("dashboardItemId", "invalid_input", "A valid integer is required.")
		}
		f.DashboardItemID = &id
	}
	if raw := q.Get("deleted"); raw != "" {
		if f.Deleted, err = strconv.ParseBool(raw); err != nil {
			return answer{}, controlplane.FieldError("deleted", "invalid_input", "Must be a valid boolean.")
		}
	}
	if f.After, err = timeParam(r, "after"); err != nil {
		return answer{}, err
	}
	if f.Before, err = timeParam(r, "before"); err != nil {
		return answer{}, err
	}
	list, total, err := s.cfg.Annotations.FindAnnotations(r.Context(), f)
	if err != nil {
		return answer{}, err
	}
	out := make([]annotationJSON, len(list))
	for i, a := range list {
		out[i] = newAnnotationJSON(a)
	}
	return ok(s.newPage(r, total, limit, offset, out)), nil
}

func (s *Server) handleCreateAnnotation(r *http.Request, c *call) (answer, error) {
	upd, err := decodeAnnotationUpdate(r)
	if err != nil {
		return answer{}, err
	}
	a, err := s.cfg.Annotations.CreateAnnotation(r.Context(), c.project.ID, upd)
	if err != nil {
		return answer{}, err
	}
	return created(newAnnotationJSON(a)), nil
}

// pathID is the path's {id} as a positive integer; anything else addresses nothing (404).
func pathID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, controlplane.ErrNotFound
	}
	return id, nil
}

func (s *Server) handleGetAnnotation(r *http.Request, c *call) (answer, error) {
	id, err := pathID(r)
	if err != nil {
		return answer{}, err
	}
	a, err := s.cfg.Annotations.FindAnnotationByID(r.Context(), c.project.ID, id)
	if err != nil {
		return answer{}, err
	}
	return ok(newAnnotationJSON(a)), nil
}

func (s *Server) handlePatchAnnotation(r *http.Request, c *call) (answer, error) {
	id, err := pathID(r)
	if err != nil {
		return answer{}, err
	}
	upd, err := decodeAnnotationUpdate(r)
	if err != nil {
		return answer{}, err
	}
	a, err := s.cfg.Annotations.UpdateAnnotation(r.Context(), c.project.ID, id, upd)
	if err != nil {
		return answer{}, err
	}
	return ok(newAnnotationJSON(a)), nil
}

// decodeAnnotationUpdate reads the writable annotation fields of the body.
func decodeAnnotationUpdate(r *http.Request) (controlplane.AnnotationUpdate, error) {
	var u controlplane.AnnotationUpdate
	f, err := decodeObject(r)
	if err != nil {
		return u, err
	}
	for _, step := range []error{
		f.str("content", &u.Content),
		f.str("creation_type", &u.CreationType),
		f.str("scope", &u.Scope),
		f.boolean("deleted", &u.Deleted),
		f.nullableTime("date_marker", &u.DateMarker, &u.DateMarkerSet),
		f.nullableInt("dashboard_item", &u.DashboardItem, &u.DashboardItemSet),
		f.nullableInt("dashboard_id", &u.DashboardID, &u.DashboardIDSet),
	} {
		if step != nil {
			return u, step
		}
	}
	return u, nil
}

// nullableTime reads an ISO 8601 field that may be null.
func (f fields) nullableTime(name string, dst **time.Time, set *bool) error {
	raw, ok := f[name]
	if !ok {
		return nil
	}
	*set = true
	if isNull(raw) {
		return nil
	}
	return f.datetime(name, dst)
}

// nullableInt reads an integer field that may be null.
func (f fields) nullableInt(name string, dst **int64, set *bool) error {
	raw, ok := f[name]
	if !ok {
		return nil
	}
	*set = true
	if isNull(raw) {
		return nil
	}
	var n int64
	if err := json.Unmarshal(raw, &n); err != nil {
		return typeError(name, "A valid integer is required.")
	}
	*dst = &n
	return nil
}

package httpapi

import (
	"encoding/json"
	"net/http"

	"github.com/flagedge/flagedge/controlplane"
)

// minimalFlagJSON is a flag as nested in an early access feature.
type minimalFlagJSON struct {
	ID                         int64           `json:"id"`
	TeamID                     int64           `json:"team_id"`
	Name                       string          `json:"name"`
	Key                        string          `json:"key"`
	Filters                    json.RawMessage `json:"filters"`
	Deleted                    bool            `json:"deleted"`
	Active                     bool            `json:"active"`
	EnsureExperienceContinuity bool            `json:"ensure_experience_continuity"`
	Version                    int             `json:"version"`
}

// earlyAccessFeatureJSON is an early access feature as the API shows it.
type earlyAccessFeatureJSON struct {
	ID               string           `json:"id"`
	FeatureFlag      *minimalFlagJSON `json:"feature_flag"`
	Name             string           `json:"name"`
	Description      string           `json:"description"`
	Stage            string           `json:"stage"`
	DocumentationURL string           `json:"documentation_url"`
	CreatedAt        timeJSON         `json:"created_at"`
}

func newEarlyAccessFeatureJSON(f *controlplane.EarlyAccessFeature) earlyAccessFeatureJSON {
	out := earlyAccessFeatureJSON{ID: f.ID, Name: f.Name, Description: f.Description, Stage: f.Stage,
		DocumentationURL: f.DocumentationURL, CreatedAt: timeJSON(f.CreatedAt)}
	if fl := f.FeatureFlag; fl != nil {
		out.FeatureFlag = &minimalFlagJSON{ID: fl.ID, TeamID: fl.ProjectID, Name: fl.Name, Key: fl.Key, Filters: fl.Filters,
			Deleted: fl.Deleted, Active: fl.Active, EnsureExperienceContinuity: fl.EnsureExperienceContinuity, Version: fl.Version}
	}
	return out
}

func decodeFeatureUpdate(r *http.Request, creating bool) (controlplane.EarlyAccessFeatureUpdate, error) {
	var u controlplane.EarlyAccessFeatureUpdate
	f, err := decodeObject(r)
	if err != nil {
		return u, err
	}
	steps := []error{f.str("name", &u.Name), f.str("description", &u.Description), f.str("stage", &u.Stage),
		f.str("documentation_url", &u.DocumentationURL)}
	if creating { // feature_flag_id is write-once, as in PostHog
		steps = append(steps, decode(f, "feature_flag_id", &u.FeatureFlagID, "a valid integer"))
	}
	for _, step := range steps {
		if step != nil {
			return u, step
		}
	}
	return u, nil
}

func (s *Server) handleListFeatures(r *http.Request, c *call) (answer, error) {
	limit, offset, err := pageParams(r)
	if err != nil {
		return answer{}, err
	}
	list, total, err := s.cfg.EarlyAccess.FindEarlyAccessFeatures(r.Context(), c.project.ID, limit, offset)
	if err != nil {
		return answer{}, err
	}
	out := make([]earlyAccessFeatureJSON, len(list))
	for i, f := range list {
		out[i] = newEarlyAccessFeatureJSON(f)
	}
	return ok(s.newPage(r, total, limit, offset, out)), nil
}

func (s *Server) handleCreateFeature(r *http.Request, c *call) (answer, error) {
	upd, err := decodeFeatureUpdate(r, true)
	if err != nil {
		return answer{}, err
	}
	f, err := s.cfg.EarlyAccess.CreateEarlyAccessFeature(r.Context(), c.project.ID, upd)
	if err != nil {
		return answer{}, err
	}
	return created(newEarlyAccessFeatureJSON(f)), nil
}

func (s *Server) handleGetFeature(r *http.Request, c *call) (answer, error) {
	f, err := s.cfg.EarlyAccess.FindEarlyAccessFeatureByID(r.Context(), c.project.ID, r.PathValue("id"))
	if err != nil {
		return answer{}, err
	}
	return ok(newEarlyAccessFeatureJSON(f)), nil
}

func (s *Server) handlePatchFeature(r *http.Request, c *call) (answer, error) {
	upd, err := decodeFeatureUpdate(r, false)
	if err != nil {
		return answer{}, err
	}
	f, err := s.cfg.EarlyAccess.UpdateEarlyAccessFeature(r.Context(), c.project.ID, r.PathValue("id"), upd)
	if err != nil {
		return answer{}, err
	}
	return ok(newEarlyAccessFeatureJSON(f)), nil
}

func (s *Server) handleDeleteFeature(r *http.Request, c *call) (answer, error) {
	if err := s.cfg.EarlyAccess.DeleteEarlyAccessFeature(r.Context(), c.project.ID, r.PathValue("id")); err != nil {
		return answer{}, err
	}
	return noContent(), nil
}

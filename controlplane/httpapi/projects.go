package httpapi

import (
	"net/http"

	"github.com/flagedge/flagedge/controlplane"
)

func (s *Server) handleListProjects(r *http.Request, key *controlplane.APIKey) (answer, error) {
	limit, offset, err := pageParams(r)
	if err != nil {
		return answer{}, err
	}
	list, total, err := s.cfg.Projects.FindProjects(r.Context(), controlplane.ProjectFilter{
		OrganizationID: key.User.OrganizationID, IDs: key.Projects, Limit: limit, Offset: offset,
	})
	if err != nil {
		return answer{}, err
	}
	out := make([]projectJSON, len(list))
	for i, p := range list {
		out[i] = newProjectJSON(p, &key.User)
	}
	return ok(s.newPage(r, total, limit, offset, out)), nil
}

func (s *Server) handleCreateProject(r *http.Request, key *controlplane.APIKey) (answer, error) {
	if !key.ReachesOrganization() {
		return answer{}, controlplane.ErrPermissionDenied // a key limited to projects cannot create more
	}
	f, err := decodeObject(r)
	if err != nil {
		return answer{}, err
	}
	var name *string
	if err := f.str("name", &name); err != nil {
		return answer{}, err
	}
	if name == nil {
		return answer{}, controlplane.FieldError("name", "required", "This field is required.")
	}
	p, err := s.cfg.Projects.CreateProject(r.Context(), key.User.OrganizationID, *name)
	if err != nil {
		return answer{}, err
	}
	return created(newProjectJSON(p, &key.User)), nil
}

func (s *Server) handleGetProject(r *http.Request, c *call) (answer, error) {
	return ok(newProjectJSON(c.project, &c.key.User)), nil
}

func (s *Server) handlePatchProject(r *http.Request, c *call) (answer, error) {
	f, err := decodeObject(r)
	if err != nil {
		return answer{}, err
	}
	var upd controlplane.ProjectUpdate
	if err := f.str("name", &upd.Name); err != nil {
		return answer{}, err
	}
	if err := f.str("timezone", &upd.Timezone); err != nil {
		return answer{}, err
	}
	for name, dst := range map[string]**bool{
		"autocapture_opt_out": &upd.AutocaptureOptOut, "session_recording_opt_in": &upd.SessionRecordingOptIn,
		"heatmaps_opt_in": &upd.HeatmapsOptIn, "capture_console_log_opt_in": &upd.CaptureConsoleLogOptIn,
		"capture_performance_opt_in": &upd.CapturePerformanceOptIn, "autocapture_exceptions_opt_in": &upd.AutocaptureExceptionsOptIn,
		"store_events": &upd.StoreEvents,
	} {
		if err := f.boolean(name, dst); err != nil {
			return answer{}, err
		}
	}
	p, err := s.cfg.Projects.UpdateProject(r.Context(), c.project.ID, upd)
	if err != nil {
		return answer{}, err
	}
	return ok(newProjectJSON(p, &c.key.User)), nil
}

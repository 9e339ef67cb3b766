package httpapi

import (
	"net/http"

	"github.com/flagedge/flagedge/controlplane"
)

func (s *Server) handleListProjects(w http.ResponseWriter, r *http.Request, key *controlplane.APIKey) error {
	limit, offset, err := pageParams(r)
	if err != nil {
		return err
	}
	list, total, err := s.cfg.Projects.FindProjects(r.Context(), controlplane.ProjectFilter{
		OrganizationID: key.User.OrganizationID, IDs: key.Projects, Limit: limit, Offset: offset,
	})
	if err != nil {
		return err
	}
	out := make([]projectJSON, len(list))
	for i, p := range list {
		out[i] = newProjectJSON(p, &key.User)
	}
	writeJSON(w, http.StatusOK, s.newPage(r, total, limit, offset, out))
	return nil
}

func (s *Server) handleCreateProject(w http.ResponseWriter, r *http.Request, key *controlplane.APIKey) error {
	if !key.ReachesOrganization() {
		return controlplane.ErrPermissionDenied // a key limited to projects cannot create more
	}
	f, err := decodeObject(w, r)
	if err != nil {
		return err
	}
	var name *string
	if err := f.str("name", &name); err != nil {
		return err
	}
	if name == nil {
		return controlplane.FieldError("name", "required", "This field is required.")
	}
	p, err := s.cfg.Projects.CreateProject(r.Context(), key.User.OrganizationID, *name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, newProjectJSON(p, &key.User))
	return nil
}

func (s *Server) handleGetProject(w http.ResponseWriter, r *http.Request, c *call) error {
	writeJSON(w, http.StatusOK, newProjectJSON(c.project, &c.key.User))
	return nil
}

func (s *Server) handlePatchProject(w http.ResponseWriter, r *http.Request, c *call) error {
	f, err := decodeObject(w, r)
	if err != nil {
		return err
	}
	var upd controlplane.ProjectUpdate
	if err := f.str("name", &upd.Name); err != nil {
		return err
	}
	if err := f.str("timezone", &upd.Timezone); err != nil {
		return err
	}
	for name, dst := range map[string]**bool{
		"autocapture_opt_out": &upd.AutocaptureOptOut, "session_recording_opt_in": &upd.SessionRecordingOptIn,
		"heatmaps_opt_in": &upd.HeatmapsOptIn, "capture_console_log_opt_in": &upd.CaptureConsoleLogOptIn,
		"capture_performance_opt_in": &upd.CapturePerformanceOptIn, "autocapture_exceptions_opt_in": &upd.AutocaptureExceptionsOptIn,
	} {
		if err := f.boolean(name, dst); err != nil {
			return err
		}
	}
	p, err := s.cfg.Projects.UpdateProject(r.Context(), c.project.ID, upd)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, newProjectJSON(p, &c.key.User))
	return nil
}

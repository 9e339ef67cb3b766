package httpapi

import (
	"net/http"
	"strconv"

	"github.com/flagedge/flagedge/controlplane"
)

func (s *Server) handleListFlags(w http.ResponseWriter, r *http.Request, c *call) error {
	limit, offset, err := pageParams(r)
	if err != nil {
		return err
	}
	filter := controlplane.FlagFilter{ProjectID: c.project.ID, Limit: limit, Offset: offset}
	switch r.URL.Query().Get("stale") {
	case "", "false", "0":
	case "true", "1":
		filter.Stale = true
	default:
		return controlplane.FieldError("stale", "invalid_input", "stale must be true or false.")
	}
	list, total, err := s.cfg.Flags.FindFlags(r.Context(), filter)
	if err != nil {
		return err
	}
	editable, err := s.editableFlags(r, c, list)
	if err != nil {
		return err
	}
	out := make([]flagJSON, len(list))
	for i, f := range list {
		out[i] = newFlagJSON(f, editable[f.ID])
	}
	if err := s.addUsage(r, c.project.ID, list, out); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.newPage(r, total, limit, offset, out))
	return nil
}

func (s *Server) handleCreateFlag(w http.ResponseWriter, r *http.Request, c *call) error {
	upd, err := decodeFlagUpdate(w, r)
	if err != nil {
		return err
	}
	f, err := s.cfg.Flags.CreateFlag(r.Context(), &c.key.User, c.project.ID, upd)
	if err != nil {
		return err
	}
	return s.writeFlag(w, r, c, f, http.StatusCreated)
}

func (s *Server) handleGetFlag(w http.ResponseWriter, r *http.Request, c *call) error {
	f, err := s.flagFromPath(r, c)
	if err != nil {
		return err
	}
	return s.writeFlag(w, r, c, f, http.StatusOK)
}

func (s *Server) handlePatchFlag(w http.ResponseWriter, r *http.Request, c *call) error {
	f, err := s.flagFromPath(r, c)
	if err != nil {
		return err
	}
	upd, err := decodeFlagUpdate(w, r)
	if err != nil {
		return err
	}
	f, err = s.cfg.Flags.UpdateFlag(r.Context(), &c.key.User, c.project.ID, f.ID, upd)
	if err != nil {
		return err
	}
	return s.writeFlag(w, r, c, f, http.StatusOK)
}

// flagFromPath loads the flag named by the path's id within the call's project.
func (s *Server) flagFromPath(r *http.Request, c *call) (*controlplane.Flag, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return nil, controlplane.ErrNotFound
	}
	return s.cfg.Flags.FindFlagByID(r.Context(), c.project.ID, id)
}

// editableFlags reports which of the flags the caller may change.
func (s *Server) editableFlags(r *http.Request, c *call, list []*controlplane.Flag) (map[int64]bool, error) {
	ids := make([]int64, len(list))
	for i, f := range list {
		ids[i] = f.ID
	}
	return s.cfg.Roles.EditableFlags(r.Context(), &c.key.User, ids)
}

// flagJSON renders a flag with can_edit for the caller.
func (s *Server) flagJSON(r *http.Request, c *call, f *controlplane.Flag) (flagJSON, error) {
	editable, err := s.cfg.Roles.EditableFlags(r.Context(), &c.key.User, []int64{f.ID})
	if err != nil {
		return flagJSON{}, err
	}
	return newFlagJSON(f, editable[f.ID]), nil
}

// SnapshotVersionHeader carries, on every flag write, the project's snapshot version that
// contains it: the version to wait for (rollout_status, wait-for-edges) and the one edges name
// in the same header of the answers they compute from it.
const SnapshotVersionHeader = "X-Flagedge-Snapshot-Version"

func (s *Server) writeFlag(w http.ResponseWriter, r *http.Request, c *call, f *controlplane.Flag, status int) error {
	out, err := s.flagJSON(r, c, f)
	if err != nil {
		return err
	}
	usage := []flagJSON{out}
	if err := s.addUsage(r, c.project.ID, []*controlplane.Flag{f}, usage); err != nil {
		return err
	}
	out = usage[0]
	if f.SnapshotVersion > 0 {
		w.Header().Set(SnapshotVersionHeader, strconv.FormatInt(f.SnapshotVersion, 10))
	}
	writeJSON(w, status, out)
	return nil
}

// decodeFlagUpdate reads the writable flag fields of the body; read-only and unknown fields
// are ignored.
func decodeFlagUpdate(w http.ResponseWriter, r *http.Request) (controlplane.FlagUpdate, error) {
	var u controlplane.FlagUpdate
	f, err := decodeObject(w, r)
	if err != nil {
		return u, err
	}
	for _, step := range []error{
		f.str("name", &u.Name),
		f.str("key", &u.Key),
		f.object("filters", &u.Filters),
		f.boolean("deleted", &u.Deleted),
		f.boolean("active", &u.Active),
		f.datetime("created_at", &u.CreatedAt),
		f.boolean("ensure_experience_continuity", &u.EnsureExperienceContinuity),
		f.boolean("performed_rollback", &u.PerformedRollback),
		f.strings("tags", &u.Tags),
		f.ints("analytics_dashboards", &u.AnalyticsDashboards),
		f.boolean("has_enriched_analytics", &u.HasEnrichedAnalytics),
	} {
		if step != nil {
			return u, step
		}
	}
	f.anyJSON("rollback_conditions", &u.RollbackConditions)
	return u, nil
}

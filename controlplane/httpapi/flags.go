package httpapi

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/flagedge/flagedge/controlplane"
)

func (s *Server) handleListFlags(r *http.Request, c *call) (answer, error) {
	limit, offset, err := pageParams(r)
	if err != nil {
		return answer{}, err
	}
	filter, err := flagFilter(r)
	if err != nil {
		return answer{}, err
	}
	filter.ProjectID, filter.Limit, filter.Offset = c.project.ID, limit, offset
	list, total, err := s.cfg.Flags.FindFlags(r.Context(), filter)
	if err != nil {
		return answer{}, err
	}
	editable, err := s.editableFlags(r, c, list)
	if err != nil {
		return answer{}, err
	}
	out := make([]flagJSON, len(list))
	for i, f := range list {
		out[i] = newFlagJSON(f, editable[f.ID])
	}
	if err := s.addUsage(r, c.project.ID, list, out); err != nil {
		return answer{}, err
	}
	return ok(s.newPage(r, total, limit, offset, out)), nil
}

// flagFilter reads PostHog's list filters: search, active (true, false or STALE; also
// ?stale=true),
// created_by_id, type, tags and excluded_properties (JSON lists of names), evaluation_runtime,
// has_evaluation_tags and order. Unknown values filter nothing, as in PostHog, except an
// order or creator that cannot be used, which is 400.
func flagFilter(r *http.Request) (controlplane.FlagFilter, error) {
	q := r.URL.Query()
	var f controlplane.FlagFilter
	f.Search = q.Get("search")
	switch v := q.Get("active"); v {
	case "":
	case "STALE":
		f.Stale = true
	default:
		active := v == "true"
		f.Active = &active
	}
	switch q.Get("stale") {
	case "", "false", "0":
	case "true", "1":
		f.Stale = true
	default:
		return f, controlplane.FieldError("stale", "invalid_input", "stale must be true or false.")
	}
	if v := q.Get("created_by_id"); v != "" {
		id, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return f, controlplane.FieldError("created_by_id", "invalid_input", "A valid integer is required.")
		}
		f.CreatedBy = &id
	}
	f.Type = q.Get("type")
	f.EvaluationRuntime = q.Get("evaluation_runtime")
	f.Tags, f.ExcludedKeys = jsonList(q.Get("tags")), jsonList(q.Get("excluded_properties"))
	if v := q.Get("has_evaluation_tags"); v != "" {
		has := strings.EqualFold(v, "true") || v == "1" || strings.EqualFold(v, "yes")
		f.HasEvaluationTags = &has
	}
	if v := q.Get("order"); v != "" {
		if !slices.Contains(controlplane.FlagOrderFields, strings.TrimPrefix(v, "-")) {
			return f, controlplane.FieldError("order", "invalid_input",
				"Order by one of "+strings.Join(controlplane.FlagOrderFields, ", ")+", with - first for descending.")
		}
		f.Order = v
	}
	return f, nil
}

// jsonList reads a JSON list of strings; anything else is no list, as PostHog ignores it.
func jsonList(v string) []string {
	var list []string
	if v == "" || json.Unmarshal([]byte(v), &list) != nil {
		return nil
	}
	return list
}

func (s *Server) handleCreateFlag(r *http.Request, c *call) (answer, error) {
	upd, err := decodeFlagUpdate(r)
	if err != nil {
		return answer{}, err
	}
	f, err := s.cfg.Flags.CreateFlag(r.Context(), c.project.ID, upd)
	if err != nil {
		return answer{}, err
	}
	return s.answerWrittenFlag(r, c, f, http.StatusCreated)
}

func (s *Server) handleGetFlag(r *http.Request, c *call) (answer, error) {
	f, err := s.flagFromPath(r, c)
	if err != nil {
		return answer{}, err
	}
	return s.answerFlag(r, c, f, newFlagJSON(f, f.CanEdit), http.StatusOK)
}

// handlePatchFlag changes the flag; the update reads (and locks) it. A body that cannot be
// read is a 400 only for a flag that exists, as in PostHog, which finds the flag first.
func (s *Server) handlePatchFlag(r *http.Request, c *call) (answer, error) {
	id, err := flagIDFromPath(r)
	if err != nil {
		return answer{}, err
	}
	upd, err := decodeFlagUpdate(r)
	if err != nil {
		if _, missing := s.cfg.Flags.FindFlagByID(r.Context(), c.project.ID, id); missing != nil {
			return answer{}, missing
		}
		return answer{}, err
	}
	f, err := s.cfg.Flags.UpdateFlag(r.Context(), c.project.ID, id, upd)
	if err != nil {
		return answer{}, err
	}
	return s.answerWrittenFlag(r, c, f, http.StatusOK)
}

// flagIDFromPath is the path's flag id; anything but a positive id addresses no flag.
func flagIDFromPath(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, controlplane.ErrNotFound
	}
	return id, nil
}

// flagFromPath loads the flag named by the path's id within the call's project.
func (s *Server) flagFromPath(r *http.Request, c *call) (*controlplane.Flag, error) {
	id, err := flagIDFromPath(r)
	if err != nil {
		return nil, err
	}
	return s.cfg.Flags.FindFlagByID(r.Context(), c.project.ID, id)
}

// editableFlags reports which of the flags the caller may change.
func (s *Server) editableFlags(r *http.Request, c *call, list []*controlplane.Flag) (map[int64]bool, error) {
	ids := make([]int64, len(list))
	for i, f := range list {
		ids[i] = f.ID
	}
	return s.cfg.Roles.EditableFlags(r.Context(), ids)
}

// flagJSON renders a flag with can_edit for the caller, asked anew: for a flag whose role
// access the call has changed since it read the flag (a flag read only carries its CanEdit).
func (s *Server) flagJSON(r *http.Request, c *call, f *controlplane.Flag) (flagJSON, error) {
	editable, err := s.cfg.Roles.EditableFlags(r.Context(), []int64{f.ID})
	if err != nil {
		return flagJSON{}, err
	}
	return newFlagJSON(f, editable[f.ID]), nil
}

// SnapshotVersionHeader carries, on every flag write, the project's snapshot version that
// contains it: the version to wait for (rollout_status, wait-for-edges) and the one edges name
// in the same header of the answers they compute from it.
const SnapshotVersionHeader = "X-Flagedge-Snapshot-Version"

// answerWrittenFlag answers a flag the caller has just created or changed: the flag service
// writes only for a user who may change the flag (CanEditFlag, a creator always may), so it
// is editable without asking again.
func (s *Server) answerWrittenFlag(r *http.Request, c *call, f *controlplane.Flag, status int) (answer, error) {
	return s.answerFlag(r, c, f, newFlagJSON(f, true), status)
}

// answerFlag answers the flag, rendered as out, with its usage and, when it has one, its
// snapshot version in SnapshotVersionHeader.
func (s *Server) answerFlag(r *http.Request, c *call, f *controlplane.Flag, out flagJSON, status int) (answer, error) {
	usage := []flagJSON{out}
	if err := s.addUsage(r, c.project.ID, []*controlplane.Flag{f}, usage); err != nil {
		return answer{}, err
	}
	a := answer{status: status, value: usage[0]}
	if f.SnapshotVersion > 0 {
		a = a.with(SnapshotVersionHeader, strconv.FormatInt(f.SnapshotVersion, 10))
	}
	return a, nil
}

// decodeFlagUpdate reads the writable flag fields of the body; read-only and unknown fields
// are ignored.
func decodeFlagUpdate(r *http.Request) (controlplane.FlagUpdate, error) {
	var u controlplane.FlagUpdate
	f, err := decodeObject(r)
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
		f.evaluationRuntime(&u.EvaluationRuntime),
		f.evaluationTags(&u.EvaluationTags),
		f.nullableStr("bucketing_identifier", &u.BucketingIdentifier),
	} {
		if step != nil {
			return u, step
		}
	}
	f.anyJSON("rollback_conditions", &u.RollbackConditions)
	return u, nil
}

// evaluationRuntime reads evaluation_runtime. PostHog stores a null or blank one, which its
// /flags service treats as "all": flagedge stores "all".
func (f fields) evaluationRuntime(dst **string) error {
	if raw, ok := f["evaluation_runtime"]; ok && isNull(raw) {
		all := "all"
		*dst = &all
		return nil
	}
	if err := f.str("evaluation_runtime", dst); err != nil || *dst == nil || **dst != "" {
		return err
	}
	all := "all"
	*dst = &all
	return nil
}

// evaluationTags reads evaluation_tags, or evaluation_contexts, PostHog's newer name for them.
func (f fields) evaluationTags(dst **[]string) error {
	if _, ok := f["evaluation_contexts"]; ok {
		if err := f.strings("evaluation_contexts", dst); err != nil || *dst != nil {
			return err
		}
	}
	return f.strings("evaluation_tags", dst)
}

// nullableStr reads a string field where null, as in PostHog, unsets it ("").
func (f fields) nullableStr(name string, dst **string) error {
	if raw, ok := f[name]; ok && isNull(raw) {
		empty := ""
		*dst = &empty
		return nil
	}
	return f.str(name, dst)
}

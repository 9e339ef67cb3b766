package httpapi

import (
	"net/http"

	"github.com/flagedge/flagedge/controlplane"
)

// flagCopyJSON is one flag a copy left in a target: the flag as the flag API answers it, its
// project as team_id, and PostHog's warning fields when they say something.
type flagCopyJSON struct {
	flagJSON
	TeamID                 int64    `json:"team_id"`
	FlagDependencyWarnings []string `json:"flag_dependency_warnings,omitempty"`
	ScheduleCopyWarning    string   `json:"schedule_copy_warning,omitempty"`
	CopiedDependencyKeys   []string `json:"copied_dependency_keys,omitempty"`
	DependencyCopyWarnings []string `json:"dependency_copy_warnings,omitempty"`
}

type flagCopyFailureJSON struct {
	ProjectID    int64  `json:"project_id"`
	ErrorMessage string `json:"error_message"`
	// ApprovalPending and ChangeRequestID are there when the target's approval gate held the
	// copy: the change request to approve.
	ApprovalPending bool   `json:"approval_pending,omitempty"`
	ChangeRequestID string `json:"change_request_id,omitempty"`
}

type flagCopyResultJSON struct {
	Success []flagCopyJSON        `json:"success"`
	Failed  []flagCopyFailureJSON `json:"failed"`
}

type copyRequirementsJSON struct {
	CanCopyDependencies  bool     `json:"can_copy_dependencies"`
	DependencyCount      int      `json:"dependency_count"`
	CopiedDependencyKeys []string `json:"copied_dependency_keys"`
	ReusedDependencyKeys []string `json:"reused_dependency_keys"`
	Warnings             []string `json:"warnings"`
	Reason               string   `json:"reason"`
}

// decodeFlagCopy reads PostHog's copy_flags body; the store checks what is required.
func decodeFlagCopy(r *http.Request) (controlplane.FlagCopyRequest, error) {
	var req controlplane.FlagCopyRequest
	f, err := decodeObject(r)
	if err != nil {
		return req, err
	}
	var key *string
	var from *int64
	var targets *[]int64
	var schedule, disable, deps *bool
	for _, step := range []error{
		f.str("feature_flag_key", &key),
		decode(f, "from_project", &from, "a valid integer"),
		f.ints("target_project_ids", &targets),
		f.boolean("copy_schedule", &schedule),
		f.boolean("disable_copied_flag", &disable),
		f.boolean("copy_dependencies", &deps),
	} {
		if step != nil {
			return req, step
		}
	}
	setIf(&req.FeatureFlagKey, key)
	setIf(&req.SourceProjectID, from)
	setIf(&req.TargetProjectIDs, targets)
	setIf(&req.CopySchedule, schedule)
	setIf(&req.DisableCopiedFlag, disable)
	setIf(&req.CopyDependencies, deps)
	return req, nil
}

func setIf[T any](dst, src *T) {
	if src != nil {
		*dst = *src
	}
}

// handleCopyFlags copies a flag into other projects of the organisation (PostHog's
// copy_flags): 200 with what was copied where and which targets failed.
func (s *Server) handleCopyFlags(r *http.Request, key *controlplane.APIKey) (answer, error) {
	req, err := decodeFlagCopy(r)
	if err != nil {
		return answer{}, err
	}
	res, err := s.cfg.FlagCopies.CreateFlagCopies(r.Context(), key.User.OrganizationID, req)
	if err != nil {
		return answer{}, err
	}
	out := flagCopyResultJSON{Success: make([]flagCopyJSON, len(res.Success)), Failed: make([]flagCopyFailureJSON, len(res.Failed))}
	for i, c := range res.Success {
		// The copy was written by the caller, who may therefore change it (as answerWrittenFlag).
		out.Success[i] = flagCopyJSON{flagJSON: newFlagJSON(c.Flag, true), TeamID: c.Flag.ProjectID,
			FlagDependencyWarnings: c.FlagDependencyWarnings, ScheduleCopyWarning: c.ScheduleCopyWarning,
			CopiedDependencyKeys: c.CopiedDependencyKeys, DependencyCopyWarnings: c.DependencyCopyWarnings}
	}
	for i, f := range res.Failed {
		out.Failed[i] = flagCopyFailureJSON{ProjectID: f.ProjectID, ErrorMessage: f.ErrorMessage,
			ApprovalPending: f.ChangeRequestID != "", ChangeRequestID: f.ChangeRequestID}
	}
	return ok(out), nil
}

// handleCopyRequirements previews which dependencies a copy with copy_dependencies would copy
// (PostHog's copy_flags/dependency_requirements).
func (s *Server) handleCopyRequirements(r *http.Request, key *controlplane.APIKey) (answer, error) {
	req, err := decodeFlagCopy(r)
	if err != nil {
		return answer{}, err
	}
	res, err := s.cfg.FlagCopies.FindCopyRequirements(r.Context(), key.User.OrganizationID, req)
	if err != nil {
		return answer{}, err
	}
	return ok(copyRequirementsJSON{CanCopyDependencies: res.CanCopyDependencies, DependencyCount: res.DependencyCount,
		CopiedDependencyKeys: nonNil(res.CopiedDependencyKeys), ReusedDependencyKeys: nonNil(res.ReusedDependencyKeys),
		Warnings: nonNil(res.Warnings), Reason: res.Reason}), nil
}

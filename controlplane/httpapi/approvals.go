package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/flagedge/flagedge/controlplane"
)

// policyJSON is the API's approval policy (PostHog's ApprovalPolicySerializer).
type policyJSON struct {
	ID                        string                        `json:"id"`
	ActionKey                 string                        `json:"action_key"`
	Conditions                controlplane.PolicyConditions `json:"conditions"`
	ApproverConfig            controlplane.ApproverConfig   `json:"approver_config"`
	AllowSelfApprove          bool                          `json:"allow_self_approve"`
	BypassOrgMembershipLevels []int                         `json:"bypass_org_membership_levels"`
	BypassRoles               []string                      `json:"bypass_roles"`
	ExpiresAfter              string                        `json:"expires_after"`
	Enabled                   bool                          `json:"enabled"`
	AllowApprovedReleasePlans bool                          `json:"allow_approved_release_plans"`
	CreatedBy                 *userJSON                     `json:"created_by"`
	CreatedAt                 timeJSON                      `json:"created_at"`
	UpdatedAt                 timeJSON                      `json:"updated_at"`
}

func newPolicyJSON(p *controlplane.ApprovalPolicy) policyJSON {
	cfg := p.ApproverConfig
	cfg.Users, cfg.Roles = nonNil(cfg.Users), nonNil(cfg.Roles)
	return policyJSON{ID: p.ID, ActionKey: p.ActionKey, Conditions: p.Conditions, ApproverConfig: cfg,
		AllowSelfApprove: p.AllowSelfApprove, BypassOrgMembershipLevels: nonNil(p.BypassOrgMembershipLevels),
		BypassRoles: nonNil(p.BypassRoles), ExpiresAfter: controlplane.FormatDuration(p.ExpiresAfter), Enabled: p.Enabled,
		AllowApprovedReleasePlans: p.AllowApprovedReleasePlans, CreatedBy: newUserJSON(p.CreatedBy), CreatedAt: timeJSON(p.CreatedAt), UpdatedAt: timeJSON(p.UpdatedAt)}
}

// approvalJSON is one vote.
type approvalJSON struct {
	ID        string    `json:"id"`
	CreatedBy *userJSON `json:"created_by"`
	Decision  string    `json:"decision"`
	Reason    string    `json:"reason"`
	CreatedAt timeJSON  `json:"created_at"`
}

// changeRequestJSON is the API's change request: PostHog's ChangeRequestSerializer, and past
// it the snapshot version an applied request made and how many of the connected edges serve
// it (live_edges of total_edges; live once every one does).
type changeRequestJSON struct {
	ID               string                      `json:"id"`
	ActionKey        string                      `json:"action_key"`
	ActionVersion    int                         `json:"action_version"`
	ResourceType     string                      `json:"resource_type"`
	ResourceID       *string                     `json:"resource_id"`
	Intent           controlplane.FlagIntent     `json:"intent"`
	IntentDisplay    controlplane.IntentDisplay  `json:"intent_display"`
	PolicySnapshot   controlplane.PolicySnapshot `json:"policy_snapshot"`
	ValidationStatus string                      `json:"validation_status"`
	ValidationErrors json.RawMessage             `json:"validation_errors"`
	ValidatedAt      *timeJSON                   `json:"validated_at"`
	State            string                      `json:"state"`
	CreatedBy        *userJSON                   `json:"created_by"`
	AppliedBy        *userJSON                   `json:"applied_by"`
	CreatedAt        timeJSON                    `json:"created_at"`
	UpdatedAt        timeJSON                    `json:"updated_at"`
	ExpiresAt        timeJSON                    `json:"expires_at"`
	AppliedAt        *timeJSON                   `json:"applied_at"`
	ApplyError       *string                     `json:"apply_error"`
	ResultData       json.RawMessage             `json:"result_data"`
	Approvals        []approvalJSON              `json:"approvals"`
	CanApprove       bool                        `json:"can_approve"`
	CanCancel        bool                        `json:"can_cancel"`
	IsRequester      bool                        `json:"is_requester"`
	UserDecision     *string                     `json:"user_decision"`
	SnapshotVersion  *int64                      `json:"snapshot_version"`
	LiveEdges        *int                        `json:"live_edges"`
	TotalEdges       *int                        `json:"total_edges"`
	Live             bool                        `json:"live"`
	LiveAt           *timeJSON                   `json:"live_at"`
}

// newChangeRequestJSON renders a request; edges, when not nil, are the project's connected
// edges, read to say on how many an applied request is live.
func newChangeRequestJSON(c *controlplane.ChangeRequest, edges *controlplane.ProjectEdges) changeRequestJSON {
	out := changeRequestJSON{ID: c.ID, ActionKey: c.ActionKey, ActionVersion: c.ActionVersion, ResourceType: c.ResourceType,
		ResourceID: c.ResourceID, Intent: c.Intent, IntentDisplay: c.IntentDisplay, PolicySnapshot: c.PolicySnapshot,
		ValidationStatus: c.ValidationStatus, ValidationErrors: rawOrNull(c.ValidationErrors), ValidatedAt: optTime(c.ValidatedAt),
		State: c.State, CreatedBy: newUserJSON(c.CreatedBy), AppliedBy: newUserJSON(c.AppliedBy), CreatedAt: timeJSON(c.CreatedAt),
		UpdatedAt: timeJSON(c.UpdatedAt), ExpiresAt: timeJSON(c.ExpiresAt), AppliedAt: optTime(c.AppliedAt),
		ResultData: rawOrNull(c.ResultData), Approvals: make([]approvalJSON, len(c.Approvals)),
		CanApprove: c.Viewer.CanApprove, CanCancel: c.Viewer.CanCancel, IsRequester: c.Viewer.IsRequester,
		LiveAt: optTime(c.LiveAt), Live: c.LiveAt != nil}
	if c.ApplyError != "" {
		out.ApplyError = &c.ApplyError
	}
	if c.Viewer.Decision != "" {
		out.UserDecision = &c.Viewer.Decision
	}
	for i, a := range c.Approvals {
		out.Approvals[i] = approvalJSON{ID: a.ID, CreatedBy: newUserJSON(a.CreatedBy), Decision: a.Decision, Reason: a.Reason,
			CreatedAt: timeJSON(a.CreatedAt)}
	}
	if c.SnapshotVersion > 0 {
		v := c.SnapshotVersion
		out.SnapshotVersion = &v
		if edges != nil {
			total := len(edges.Edges)
			live := total - len(edges.Laggards(v))
			out.LiveEdges, out.TotalEdges = &live, &total
			out.Live = out.Live || live == total
		}
	}
	return out
}

func rawOrNull(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("null")
	}
	return raw
}

// projectEdges reads the project's connected edges when one of the requests was applied.
func (s *Server) projectEdges(r *http.Request, projectID int64, list ...*controlplane.ChangeRequest) (*controlplane.ProjectEdges, error) {
	for _, c := range list {
		if c.SnapshotVersion > 0 && s.cfg.EdgeSessions != nil {
			return s.cfg.EdgeSessions.FindProjectEdges(r.Context(), projectID)
		}
	}
	return nil, nil
}

// approvalErrorBody is the answer to a gated write: PostHog's 409 body (approval_required or
// change_request_pending), in the API's error shape too.
func approvalErrorBody(e *controlplane.ApprovalRequiredError) (int, any) {
	cr := newChangeRequestJSON(e.ChangeRequest, nil)
	body := map[string]any{"type": "invalid_request", "code": e.Code, "detail": e.Message, "attr": nil,
		"resource_type": cr.ResourceType, "resource_id": cr.ResourceID, "change_request_id": cr.ID}
	if e.Code == "change_request_pending" {
		body["error"] = e.Message
		body["existing_change_request"] = cr
		return http.StatusConflict, body
	}
	body["status"], body["message"] = e.Code, e.Message
	body["change_request"] = cr
	body["required_approvers"] = e.RequiredApprovers
	return http.StatusConflict, body
}

// policyConflictBody is PostHog's answer to a write more than one policy gates.
func policyConflictBody(e *controlplane.PolicyConflictError) (int, any) {
	return http.StatusBadRequest, map[string]any{"type": "validation_error", "code": "policy_conflict",
		"detail": controlplane.PolicyConflictMessage, "attr": nil, "error": controlplane.PolicyConflictMessage,
		"conflicting_policies": e.Policies, "guidance": controlplane.PolicyConflictGuidance}
}

// gateErrorBody is the body of a gate's refusal, when err is one.
func gateErrorBody(err error) (int, any, bool) {
	var gated *controlplane.ApprovalRequiredError
	var conflict *controlplane.PolicyConflictError
	switch {
	case errors.As(err, &gated):
		status, body := approvalErrorBody(gated)
		return status, body, true
	case errors.As(err, &conflict):
		status, body := policyConflictBody(conflict)
		return status, body, true
	}
	return 0, nil, false
}

// decodePolicyUpdate reads a policy's writable fields.
func decodePolicyUpdate(r *http.Request) (controlplane.ApprovalPolicyUpdate, error) {
	var u controlplane.ApprovalPolicyUpdate
	f, err := decodeObject(r)
	if err != nil {
		return u, err
	}
	var conditions, approvers json.RawMessage
	var levels *[]int64
	for _, step := range []error{
		f.str("action_key", &u.ActionKey),
		f.object("conditions", &conditions),
		f.object("approver_config", &approvers),
		f.boolean("allow_self_approve", &u.AllowSelfApprove),
		f.ints("bypass_org_membership_levels", &levels),
		f.strings("bypass_roles", &u.BypassRoles),
		f.boolean("enabled", &u.Enabled),
		f.boolean("allow_approved_release_plans", &u.AllowApprovedReleasePlans),
	} {
		if step != nil {
			return u, step
		}
	}
	if conditions != nil {
		var c controlplane.PolicyConditions
		if err := json.Unmarshal(conditions, &c); err != nil {
			return u, typeError("conditions", "Must be an object with type, field, operator (a string) and value (a number).")
		}
		u.Conditions = &c
	}
	if approvers != nil {
		var c controlplane.ApproverConfig
		if err := json.Unmarshal(approvers, &c); err != nil {
			return u, typeError("approver_config", "Must be an object with users (user ids), roles (role ids) and quorum (an integer).")
		}
		u.ApproverConfig = &c
	}
	if levels != nil {
		l := make([]int, len(*levels))
		for i, v := range *levels {
			l[i] = int(v)
		}
		u.BypassOrgMembershipLevels = &l
	}
	if raw, ok := f["expires_after"]; ok {
		d, ok := parseExpiresAfter(raw)
		if !ok {
			return u, typeError("expires_after", `Must be a duration: "[DD] [HH:[MM:]]ss" (e.g. "14 00:00:00") or seconds.`)
		}
		u.ExpiresAfter = &d
	}
	return u, nil
}

// parseExpiresAfter reads Django's duration string or a number of seconds.
func parseExpiresAfter(raw json.RawMessage) (time.Duration, bool) {
	var secs float64
	if json.Unmarshal(raw, &secs) == nil {
		return time.Duration(secs * float64(time.Second)), secs > 0
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return 0, false
	}
	return controlplane.ParseDuration(s)
}

func (s *Server) handleListPolicies(r *http.Request, c *call) (answer, error) {
	limit, offset, err := pageParams(r)
	if err != nil {
		return answer{}, err
	}
	q := r.URL.Query()
	f := controlplane.ApprovalPolicyFilter{ProjectID: c.project.ID, ActionKey: q.Get("action_key"), Limit: limit, Offset: offset}
	if v := q.Get("enabled"); v != "" {
		enabled := strings.EqualFold(v, "true")
		f.Enabled = &enabled
	}
	list, total, err := s.cfg.Approvals.FindApprovalPolicies(r.Context(), f)
	if err != nil {
		return answer{}, err
	}
	out := make([]policyJSON, len(list))
	for i, p := range list {
		out[i] = newPolicyJSON(p)
	}
	return ok(s.newPage(r, total, limit, offset, out)), nil
}

func (s *Server) handleCreatePolicy(r *http.Request, c *call) (answer, error) {
	upd, err := decodePolicyUpdate(r)
	if err != nil {
		return answer{}, err
	}
	p, err := s.cfg.Approvals.CreateApprovalPolicy(r.Context(), c.project.ID, upd)
	if err != nil {
		return answer{}, err
	}
	return created(newPolicyJSON(p)), nil
}

func (s *Server) handleGetPolicy(r *http.Request, c *call) (answer, error) {
	p, err := s.cfg.Approvals.FindApprovalPolicyByID(r.Context(), c.project.ID, r.PathValue("id"))
	if err != nil {
		return answer{}, err
	}
	return ok(newPolicyJSON(p)), nil
}

func (s *Server) handlePatchPolicy(r *http.Request, c *call) (answer, error) {
	upd, err := decodePolicyUpdate(r)
	if err != nil {
		return answer{}, err
	}
	p, err := s.cfg.Approvals.UpdateApprovalPolicy(r.Context(), c.project.ID, r.PathValue("id"), upd)
	if err != nil {
		return answer{}, err
	}
	return ok(newPolicyJSON(p)), nil
}

func (s *Server) handleDeletePolicy(r *http.Request, c *call) (answer, error) {
	if err := s.cfg.Approvals.DeleteApprovalPolicy(r.Context(), c.project.ID, r.PathValue("id")); err != nil {
		return answer{}, err
	}
	return noContent(), nil
}

// handleListChangeRequests lists the project's requests with PostHog's filters: state (one or
// several, comma-separated), action_key, requester (a user id), resource_type, resource_id.
func (s *Server) handleListChangeRequests(r *http.Request, c *call) (answer, error) {
	limit, offset, err := pageParams(r)
	if err != nil {
		return answer{}, err
	}
	q := r.URL.Query()
	f := controlplane.ChangeRequestFilter{ProjectID: c.project.ID, ActionKey: q.Get("action_key"),
		ResourceType: q.Get("resource_type"), ResourceID: q.Get("resource_id"), Limit: limit, Offset: offset}
	if v := q.Get("state"); v != "" {
		f.States = strings.Split(v, ",")
	}
	if v := q.Get("requester"); v != "" {
		id, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return answer{}, controlplane.FieldError("requester", "invalid", "Enter a number.")
		}
		f.Requester = &id
	}
	list, total, err := s.cfg.Approvals.FindChangeRequests(r.Context(), f)
	if err != nil {
		return answer{}, err
	}
	edges, err := s.projectEdges(r, c.project.ID, list...)
	if err != nil {
		return answer{}, err
	}
	out := make([]changeRequestJSON, len(list))
	for i, cr := range list {
		out[i] = newChangeRequestJSON(cr, edges)
	}
	return ok(s.newPage(r, total, limit, offset, out)), nil
}

func (s *Server) handleGetChangeRequest(r *http.Request, c *call) (answer, error) {
	cr, err := s.cfg.Approvals.FindChangeRequestByID(r.Context(), c.project.ID, r.PathValue("id"))
	if err != nil {
		return answer{}, err
	}
	edges, err := s.projectEdges(r, c.project.ID, cr)
	if err != nil {
		return answer{}, err
	}
	return ok(newChangeRequestJSON(cr, edges)), nil
}

// decisionJSON is the answer to a vote or a cancellation (PostHog's
// ChangeRequestDecisionResponseSerializer).
type decisionJSON struct {
	Status        string                    `json:"status"`
	Message       string                    `json:"message"`
	ChangeRequest changeRequestJSON         `json:"change_request"`
	Result        *controlplane.ApplyResult `json:"result,omitempty"`
}

// decide runs a vote or a cancellation with the body's reason.
func (s *Server) decide(r *http.Request, c *call,
	do func(r *http.Request, projectID int64, id, reason string) (*controlplane.Decision, error)) (answer, error) {
	f, err := decodeObject(r)
	if err != nil {
		return answer{}, err
	}
	var reason *string
	if err := f.str("reason", &reason); err != nil {
		return answer{}, err
	}
	if reason == nil {
		reason = new(string)
	}
	d, err := do(r, c.project.ID, r.PathValue("id"), *reason)
	if err != nil {
		return answer{}, err
	}
	edges, err := s.projectEdges(r, c.project.ID, d.ChangeRequest)
	if err != nil {
		return answer{}, err
	}
	return ok(decisionJSON{Status: d.Status, Message: d.Message, ChangeRequest: newChangeRequestJSON(d.ChangeRequest, edges),
		Result: d.Result}), nil
}

func (s *Server) handleApproveChangeRequest(r *http.Request, c *call) (answer, error) {
	return s.decide(r, c, func(r *http.Request, projectID int64, id, reason string) (*controlplane.Decision, error) {
		return s.cfg.Approvals.ApproveChangeRequest(r.Context(), projectID, id, reason)
	})
}

func (s *Server) handleRejectChangeRequest(r *http.Request, c *call) (answer, error) {
	return s.decide(r, c, func(r *http.Request, projectID int64, id, reason string) (*controlplane.Decision, error) {
		return s.cfg.Approvals.RejectChangeRequest(r.Context(), projectID, id, reason)
	})
}

func (s *Server) handleCancelChangeRequest(r *http.Request, c *call) (answer, error) {
	return s.decide(r, c, func(r *http.Request, projectID int64, id, reason string) (*controlplane.Decision, error) {
		return s.cfg.Approvals.CancelChangeRequest(r.Context(), projectID, id, reason)
	})
}

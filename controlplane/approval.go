package controlplane

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Approval actions: the changes to a flag an approval policy may gate (PostHog's
// actions/feature_flags.py).
const (
	// ActionFlagEnable turns a flag on, or creates it active.
	ActionFlagEnable = "feature_flag.enable"
	// ActionFlagDisable turns a flag off.
	ActionFlagDisable = "feature_flag.disable"
	// ActionFlagUpdate changes a rollout percentage: of a condition (filters.groups[]), of the
	// holdout (filters.holdout.exclusion_percentage) or of a variant
	// (filters.multivariate.variants[]).
	ActionFlagUpdate = "feature_flag.update"
)

// ApprovalActions are the action keys a policy may name.
var ApprovalActions = []string{ActionFlagEnable, ActionFlagDisable, ActionFlagUpdate}

// ResourceFlag is the resource_type of a change request about a flag.
const ResourceFlag = "feature_flag"

// States of a change request: pending → approved → applied, or rejected, expired or failed.
const (
	StatePending  = "pending"
	StateApproved = "approved"
	StateApplied  = "applied"
	StateRejected = "rejected"
	StateExpired  = "expired"
	StateFailed   = "failed"
)

// ChangeRequestStates are every state, in the order of the lifecycle.
var ChangeRequestStates = []string{StatePending, StateApproved, StateApplied, StateRejected, StateExpired, StateFailed}

// Validation statuses of a change request: stale once the flag changed under it.
const (
	ValidationValid   = "valid"
	ValidationInvalid = "invalid"
	ValidationExpired = "expired"
	ValidationStale   = "stale"
)

// Decisions of an approval vote.
const (
	DecisionApproved = "approved"
	DecisionRejected = "rejected"
)

// DefaultPolicyExpiry is how long a change request waits for its approvals unless the policy
// says otherwise (PostHog's default).
const DefaultPolicyExpiry = 14 * 24 * time.Hour

// ApproverConfig says who approves a policy's changes: the users (by id) and the members of
// the roles (by id) listed, Quorum of them.
type ApproverConfig struct {
	Users  []int64  `json:"users"`
	Roles  []string `json:"roles"`
	Quorum int      `json:"quorum"`
}

// PolicyConditions narrow which changes of its action a policy gates (PostHog's
// policies.py): none (the zero value) gates every change; "any_change" those that change the
// field; "before_after" those whose new value compares to Value with Operator; "change_amount"
// those whose change (after − before) does.
type PolicyConditions struct {
	Type     string   `json:"type,omitempty"`
	Field    string   `json:"field,omitempty"`
	Operator string   `json:"operator,omitempty"`
	Value    *float64 `json:"value,omitempty"`
}

// Condition types and the one field they read.
const (
	ConditionAnyChange    = "any_change"
	ConditionBeforeAfter  = "before_after"
	ConditionChangeAmount = "change_amount"
	FieldRolloutPercent   = "rollout_percentage"
)

// ConditionOperators are the comparisons of before_after and change_amount.
var ConditionOperators = []string{">", "<", ">=", "<=", "==", "!="}

// Validate checks the conditions of a policy for the action.
func (c *PolicyConditions) Validate(action string) error {
	if c.Type == "" {
		if c.Field != "" || c.Operator != "" || c.Value != nil {
			return FieldError("conditions", "invalid_input", "Conditions need a type: any_change, before_after or change_amount.")
		}
		return nil
	}
	if !slices.Contains([]string{ConditionAnyChange, ConditionBeforeAfter, ConditionChangeAmount}, c.Type) {
		return FieldError("conditions", "invalid_choice", `"`+cut(c.Type, 64)+`" is not a valid condition type: use any_change, before_after or change_amount.`)
	}
	if action != ActionFlagUpdate {
		return FieldError("conditions", "invalid_input", "Only feature_flag.update has conditions: it changes a rollout percentage.")
	}
	if c.Field != FieldRolloutPercent {
		return FieldError("conditions", "invalid_input", `The field of a condition is "rollout_percentage".`)
	}
	if c.Type == ConditionAnyChange {
		return nil
	}
	if !slices.Contains(ConditionOperators, c.Operator) {
		return FieldError("conditions", "invalid_choice", "The operator is one of "+strings.Join(ConditionOperators, " ")+".")
	}
	if c.Value == nil {
		return FieldError("conditions", "required", "A "+c.Type+" condition needs a numeric value.")
	}
	return nil
}

// compare applies the operator.
func compare(op string, a, b float64) bool {
	switch op {
	case ">":
		return a > b
	case "<":
		return a < b
	case ">=":
		return a >= b
	case "<=":
		return a <= b
	case "==":
		return a == b
	case "!=":
		return a != b
	}
	return false
}

// Match reports whether the conditions gate the change the intent describes: every change
// without conditions; with them, any path of the field that changes (any_change), whose new
// value compares (before_after), or whose change compares (change_amount, only where both
// values are numbers).
func (c *PolicyConditions) Match(in *FlagIntent) bool {
	if c.Type == "" {
		return true
	}
	before := byPath(in.CurrentState.RolloutPercentage)
	after := byPath(in.GatedChanges.RolloutPercentage)
	switch c.Type {
	case ConditionAnyChange:
		for _, p := range unionPaths(before, after) {
			if !sameValue(before[p], after[p]) {
				return true
			}
		}
	case ConditionBeforeAfter:
		for _, v := range in.GatedChanges.RolloutPercentage {
			if v.Value != nil && compare(c.Operator, *v.Value, *c.Value) {
				return true
			}
		}
	case ConditionChangeAmount:
		for _, p := range unionPaths(before, after) {
			b, a := before[p], after[p]
			if b != nil && a != nil && compare(c.Operator, *a-*b, *c.Value) {
				return true
			}
		}
	}
	return false
}

// RolloutValue is one rollout percentage of a flag's filters and where it is
// ("groups[0].rollout_percentage"); Value is nil for null.
type RolloutValue struct {
	Path  string   `json:"path"`
	Value *float64 `json:"value"`
}

// IntentState is a flag's gated fields before (current_state) or after (gated_changes) a change.
type IntentState struct {
	Active            *bool          `json:"active,omitempty"`
	RolloutPercentage []RolloutValue `json:"rollout_percentage,omitempty"`
}

// IntentPreconditions are what the flag must still be for the change to apply: its version
// (nil for a flag to create).
type IntentPreconditions struct {
	Version   *int    `json:"version"`
	UpdatedAt *string `json:"updated_at"`
}

// FlagIntent is what a change request asks for, as PostHog records it: the flag (FlagID nil
// for a creation), its gated fields before and after, and the whole change to make.
type FlagIntent struct {
	FlagID          *int64              `json:"flag_id"`
	FlagKey         string              `json:"flag_key"`
	CurrentState    IntentState         `json:"current_state"`
	GatedChanges    IntentState         `json:"gated_changes"`
	TriggeredPaths  []string            `json:"triggered_paths,omitempty"`
	FullRequestData FlagUpdate          `json:"full_request_data"`
	Preconditions   IntentPreconditions `json:"preconditions"`
	HTTPMethod      string              `json:"http_method"`
	// ReleasePlan, when set, is a release plan to start on the flag (flagedge's, not
	// PostHog's): applying the request starts it, and FullRequestData is its first step.
	ReleasePlan *NewReleasePlan `json:"release_plan,omitempty"`
}

// IntentDisplay is a change request's summary for reviewers.
type IntentDisplay struct {
	Description    string   `json:"description"`
	Before         any      `json:"before"`
	After          any      `json:"after"`
	TriggeredPaths []string `json:"triggered_paths,omitempty"`
}

// FlagAction is one approval action a write of a flag is, with its intent.
type FlagAction struct {
	Key    string
	Intent FlagIntent
}

// FlagActions returns the approval actions a write of a flag is (PostHog's detect): before is
// the stored flag (nil when the write creates it), after what the write makes of it, upd the
// write. Creating an active flag enables it; setting active to the other value enables or
// disables it; a change of filters that changes a rollout percentage updates it (unless it
// also changes active without sending filters). A write may be more than one action.
func FlagActions(before, after *Flag, upd *FlagUpdate) []FlagAction {
	base := FlagIntent{FlagKey: after.Key, FullRequestData: *upd, HTTPMethod: "PATCH"}
	if before == nil {
		base.HTTPMethod = "POST"
	} else {
		id, version := before.ID, before.Version
		updated := before.UpdatedAt.UTC().Format(TimeLayout)
		base.FlagID, base.FlagKey = &id, before.Key
		base.Preconditions = IntentPreconditions{Version: &version, UpdatedAt: &updated}
	}
	var out []FlagAction
	active := func(key string, was, now bool) {
		in := base
		in.CurrentState = IntentState{Active: &was}
		in.GatedChanges = IntentState{Active: &now}
		out = append(out, FlagAction{Key: key, Intent: in})
	}
	switch {
	case before == nil && after.Active:
		active(ActionFlagEnable, false, true)
	case before != nil && upd.Active != nil && *upd.Active != before.Active:
		if *upd.Active {
			active(ActionFlagEnable, false, true)
		} else {
			active(ActionFlagDisable, true, false)
		}
	}
	if upd.Filters == nil {
		return out
	}
	var old json.RawMessage
	if before != nil {
		old = before.Filters
	}
	was, now := RolloutValues(old), RolloutValues(upd.Filters)
	wasBy, nowBy := byPath(was), byPath(now)
	var triggered []string
	for _, p := range unionPaths(wasBy, nowBy) {
		if !sameValue(wasBy[p], nowBy[p]) {
			triggered = append(triggered, p)
		}
	}
	if len(triggered) == 0 {
		return out
	}
	in := base
	in.CurrentState = IntentState{RolloutPercentage: was}
	in.GatedChanges = IntentState{RolloutPercentage: now}
	in.TriggeredPaths = triggered
	return append(out, FlagAction{Key: ActionFlagUpdate, Intent: in})
}

// RolloutValues returns the rollout percentages of a flag's filters, where PostHog looks for
// them: each condition's, the holdout's exclusion percentage, each variant's.
func RolloutValues(filters json.RawMessage) []RolloutValue {
	var f struct {
		Groups  []map[string]json.RawMessage `json:"groups"`
		Holdout map[string]json.RawMessage   `json:"holdout"`
		Multi   *struct {
			Variants []map[string]json.RawMessage `json:"variants"`
		} `json:"multivariate"`
	}
	if len(filters) == 0 || json.Unmarshal(filters, &f) != nil {
		return nil
	}
	var out []RolloutValue
	add := func(path string, raw json.RawMessage) {
		var v *float64
		_ = json.Unmarshal(raw, &v) // not a number: compared as null
		out = append(out, RolloutValue{Path: path, Value: v})
	}
	for i, g := range f.Groups {
		if raw, ok := g["rollout_percentage"]; ok {
			add(fmt.Sprintf("groups[%d].rollout_percentage", i), raw)
		}
	}
	if raw, ok := f.Holdout["exclusion_percentage"]; ok {
		add("holdout.exclusion_percentage", raw)
	}
	if f.Multi != nil {
		for i, v := range f.Multi.Variants {
			if raw, ok := v["rollout_percentage"]; ok {
				add(fmt.Sprintf("multivariate.variants[%d].rollout_percentage", i), raw)
			}
		}
	}
	return out
}

func byPath(list []RolloutValue) map[string]*float64 {
	m := make(map[string]*float64, len(list))
	for _, v := range list {
		m[v.Path] = v.Value
	}
	return m
}

// unionPaths returns the paths of both, sorted.
func unionPaths(a, b map[string]*float64) []string {
	var out []string
	for p := range a {
		out = append(out, p)
	}
	for p := range b {
		if _, ok := a[p]; !ok {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

func sameValue(a, b *float64) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && *a == *b)
}

// Display is the intent's summary for reviewers (PostHog's get_display_data).
func (a *FlagAction) Display() IntentDisplay {
	in := &a.Intent
	if in.ReleasePlan != nil {
		return IntentDisplay{Description: in.ReleasePlan.Describe(in.FlagKey), Before: in.CurrentState, After: in.ReleasePlan}
	}
	switch a.Key {
	case ActionFlagEnable, ActionFlagDisable:
		verb := "Enable"
		if a.Key == ActionFlagDisable {
			verb = "Disable"
		}
		return IntentDisplay{Description: fmt.Sprintf("%s feature flag '%s'", verb, in.FlagKey), Before: in.CurrentState,
			After: in.FullRequestData}
	}
	before, after := byPath(in.CurrentState.RolloutPercentage), byPath(in.GatedChanges.RolloutPercentage)
	show := func(v *float64) string {
		if v == nil {
			return "N/A"
		}
		return strconv.FormatFloat(*v, 'f', -1, 64)
	}
	var parts []string
	for _, p := range in.TriggeredPaths {
		parts = append(parts, fmt.Sprintf("rollout percentage at %s: %s%% -> %s%%", p, show(before[p]), show(after[p])))
	}
	desc := fmt.Sprintf("Update rollout percentage for feature flag '%s'", in.FlagKey)
	if len(parts) > 0 {
		desc += ": " + strings.Join(parts, "; ")
	}
	return IntentDisplay{Description: desc, Before: in.CurrentState, After: in.GatedChanges, TriggeredPaths: in.TriggeredPaths}
}

// ApprovalPolicy gates one action on the flags of a project: a change it matches (its
// conditions) is not made but filed as a change request, applied once Quorum of the
// approvers approve it, unless its requester may bypass the policy.
type ApprovalPolicy struct {
	ID                        string
	ProjectID                 int64
	ActionKey                 string
	Conditions                PolicyConditions
	ApproverConfig            ApproverConfig
	AllowSelfApprove          bool
	BypassOrgMembershipLevels []int
	BypassRoles               []string
	ExpiresAfter              time.Duration
	Enabled                   bool
	// AllowApprovedReleasePlans lets a release plan whose start was approved make its
	// advances without review (flagedge's; PostHog has no release plans). Without it each
	// advance is a change request of its own.
	AllowApprovedReleasePlans bool
	CreatedBy                 *User
	CreatedAt, UpdatedAt      time.Time
}

// Bypasses reports whether u, a member of the roles, makes changes the policy would gate
// without approval: by organisation membership level or by role.
func (p *ApprovalPolicy) Bypasses(u *User, roles []string) bool {
	if slices.Contains(p.BypassOrgMembershipLevels, MembershipLevel(u.OrgRole)) {
		return true
	}
	for _, r := range roles {
		if slices.Contains(p.BypassRoles, r) {
			return true
		}
	}
	return false
}

// Snapshot is what a change request keeps of the policy that gated it: later edits of the
// policy do not change who approves a request already filed.
func (p *ApprovalPolicy) Snapshot() PolicySnapshot {
	return PolicySnapshot{Quorum: p.ApproverConfig.Quorum, Users: nonNil(p.ApproverConfig.Users), Roles: nonNil(p.ApproverConfig.Roles),
		AllowSelfApprove: p.AllowSelfApprove, Conditions: p.Conditions,
		BypassOrgMembershipLevels: nonNil(p.BypassOrgMembershipLevels), BypassRoles: nonNil(p.BypassRoles)}
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// PolicySnapshot is a change request's copy of its policy (PostHog's policy_snapshot).
type PolicySnapshot struct {
	Quorum                    int              `json:"quorum"`
	Users                     []int64          `json:"users"`
	Roles                     []string         `json:"roles"`
	AllowSelfApprove          bool             `json:"allow_self_approve"`
	Conditions                PolicyConditions `json:"conditions"`
	BypassOrgMembershipLevels []int            `json:"bypass_org_membership_levels"`
	BypassRoles               []string         `json:"bypass_roles"`
}

// IsApprover reports whether u, a member of the roles, is among the approvers.
func (s *PolicySnapshot) IsApprover(u *User, roles []string) bool {
	if slices.Contains(s.Users, u.ID) {
		return true
	}
	for _, r := range roles {
		if slices.Contains(s.Roles, r) {
			return true
		}
	}
	return false
}

// ApprovalPolicyUpdate holds the writable fields of a policy; nil means unchanged.
type ApprovalPolicyUpdate struct {
	ActionKey                 *string
	Conditions                *PolicyConditions
	ApproverConfig            *ApproverConfig
	AllowSelfApprove          *bool
	BypassOrgMembershipLevels *[]int
	BypassRoles               *[]string
	ExpiresAfter              *time.Duration
	Enabled                   *bool
	AllowApprovedReleasePlans *bool
}

// Validate checks the update of p (the zero policy with defaults when creating).
func (u *ApprovalPolicyUpdate) Validate(creating bool, p *ApprovalPolicy) error {
	if creating && u.ActionKey == nil {
		return FieldError("action_key", "required", "This field is required.")
	}
	if creating && u.ApproverConfig == nil {
		return FieldError("approver_config", "required", "This field is required.")
	}
	action := p.ActionKey
	if u.ActionKey != nil {
		if !slices.Contains(ApprovalActions, *u.ActionKey) {
			return FieldError("action_key", "invalid_choice", `"`+cut(*u.ActionKey, 64)+`" is not a valid action: use `+strings.Join(ApprovalActions, ", ")+".")
		}
		action = *u.ActionKey
	}
	conditions := p.Conditions
	if u.Conditions != nil {
		conditions = *u.Conditions
	}
	if err := conditions.Validate(action); err != nil {
		return err
	}
	if c := u.ApproverConfig; c != nil {
		if c.Quorum < 1 {
			return FieldError("approver_config", "invalid_input", "Quorum must be at least 1")
		}
		if len(c.Users)+len(c.Roles) == 0 {
			return FieldError("approver_config", "invalid_input", "Name at least one approver: users or roles.")
		}
		if len(c.Roles) == 0 && c.Quorum > len(c.Users) {
			return FieldError("approver_config", "invalid_input", "The quorum is more than the approvers listed.")
		}
		for _, r := range c.Roles {
			if !uuidPattern.MatchString(r) {
				return FieldError("approver_config", "invalid_input", "Roles are role ids (UUIDs).")
			}
		}
	}
	if l := u.BypassOrgMembershipLevels; l != nil {
		for _, v := range *l {
			if v != MembershipLevelMember && v != MembershipLevelAdmin {
				return FieldError("bypass_org_membership_levels", "invalid_choice", "Use 1 (member) or 8 (admin).")
			}
		}
	}
	if r := u.BypassRoles; r != nil {
		for _, id := range *r {
			if !uuidPattern.MatchString(id) {
				return FieldError("bypass_roles", "invalid_input", "Must be a valid UUID.")
			}
		}
	}
	if e := u.ExpiresAfter; e != nil && (*e < time.Minute || *e > 365*24*time.Hour) {
		return FieldError("expires_after", "invalid_input", "expires_after is between one minute and 365 days.")
	}
	return nil
}

// Apply writes the update onto p.
func (u *ApprovalPolicyUpdate) Apply(p *ApprovalPolicy) {
	setIf(&p.ActionKey, u.ActionKey)
	setIf(&p.Conditions, u.Conditions)
	setIf(&p.ApproverConfig, u.ApproverConfig)
	setIf(&p.AllowSelfApprove, u.AllowSelfApprove)
	setIf(&p.BypassOrgMembershipLevels, u.BypassOrgMembershipLevels)
	setIf(&p.BypassRoles, u.BypassRoles)
	setIf(&p.ExpiresAfter, u.ExpiresAfter)
	setIf(&p.Enabled, u.Enabled)
	setIf(&p.AllowApprovedReleasePlans, u.AllowApprovedReleasePlans)
}

var uuidPattern = regexp.MustCompile(`^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$`)

// ValidUUID reports whether s is a UUID, the ids of policies and change requests.
func ValidUUID(s string) bool { return uuidPattern.MatchString(s) }

// FormatDuration writes d as Django writes a DurationField ("14 00:00:00", "01:30:00"), the
// form of PostHog's expires_after.
func FormatDuration(d time.Duration) string {
	days := d / (24 * time.Hour)
	d -= days * 24 * time.Hour
	h, m, s := d/time.Hour, (d%time.Hour)/time.Minute, (d%time.Minute)/time.Second
	hms := fmt.Sprintf("%02d:%02d:%02d", h, m, s)
	if days > 0 {
		return fmt.Sprintf("%d %s", days, hms)
	}
	return hms
}

var durationPattern = regexp.MustCompile(`^(?:(\d{1,4})[ ]+)?(?:(\d{1,2}):)?(?:(\d{1,2}):)?(\d{1,6})$`)

// ParseDuration reads a duration as Django's DurationField accepts it ("[DD] [[HH:]MM:]ss",
// e.g. "14 00:00:00", "7 0:0:0", "3600").
func ParseDuration(s string) (time.Duration, bool) {
	m := durationPattern.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, false
	}
	n := func(v string) time.Duration {
		i, _ := strconv.Atoi(v)
		return time.Duration(i)
	}
	d := n(m[1])*24*time.Hour + n(m[4])*time.Second
	switch {
	case m[2] != "" && m[3] != "":
		d += n(m[2])*time.Hour + n(m[3])*time.Minute
	case m[2] != "":
		d += n(m[2]) * time.Minute
	}
	return d, true
}

// Approval is one vote on a change request.
type Approval struct {
	ID        string
	CreatedBy *User
	Decision  string
	Reason    string
	CreatedAt time.Time
}

// ChangeRequest is a gated change waiting for (or past) its approvals.
type ChangeRequest struct {
	ID               string
	ProjectID        int64
	ActionKey        string
	ActionVersion    int
	ResourceType     string
	ResourceID       *string // nil for a flag to create
	Intent           FlagIntent
	IntentDisplay    IntentDisplay
	PolicySnapshot   PolicySnapshot
	ValidationStatus string
	ValidationErrors json.RawMessage // JSON null when none
	ValidatedAt      *time.Time
	State            string
	CreatedBy        *User
	AppliedBy        *User
	CreatedAt        time.Time
	UpdatedAt        time.Time
	ExpiresAt        time.Time
	AppliedAt        *time.Time
	ApplyError       string
	ResultData       json.RawMessage // JSON null until applied
	Approvals        []Approval
	// SnapshotVersion is, once applied, the project's snapshot version that holds the change
	// (0 before): an edge serving it or a later one serves the change. LiveAt is when every
	// connected edge was first seen serving it.
	SnapshotVersion int64
	LiveAt          *time.Time
	// Viewer is what the user who read the request may do with it.
	Viewer ChangeRequestViewer
}

// ChangeRequestViewer is a change request as one user sees it (PostHog's can_approve,
// can_cancel, is_requester, user_decision).
type ChangeRequestViewer struct {
	CanApprove, CanCancel, IsRequester bool
	Decision                           string // the user's vote, "" when none
}

// ApprovedCount is how many approvals the request has.
func (c *ChangeRequest) ApprovedCount() int {
	n := 0
	for _, a := range c.Approvals {
		if a.Decision == DecisionApproved {
			n++
		}
	}
	return n
}

// IsRequester reports whether u filed the request.
func (c *ChangeRequest) IsRequester(u *User) bool {
	return c.CreatedBy != nil && c.CreatedBy.ID == u.ID
}

// ApproveRefusal is why u, a member of the roles, may not vote on the request (approve or
// reject it), or nil: only a pending request, not one's own unless the policy allows it, and
// only an approver of its policy (PostHog's CanApprove, with its messages).
func (c *ChangeRequest) ApproveRefusal(u *User, roles []string) error {
	switch {
	case c.State != StatePending:
		return &Error{Kind: Forbidden, Code: "permission_denied", Detail: "Only pending change requests can be approved"}
	case c.IsRequester(u) && !c.PolicySnapshot.AllowSelfApprove:
		return &Error{Kind: Forbidden, Code: "permission_denied", Detail: "You cannot approve your own change request"}
	case !c.PolicySnapshot.IsApprover(u, roles):
		return &Error{Kind: Forbidden, Code: "permission_denied", Detail: "You are not in the approver set for this change request"}
	}
	return nil
}

// CanBeCanceledBy reports whether u may cancel the request: its requester, while it is
// pending and nobody approved it yet, or once it went stale.
func (c *ChangeRequest) CanBeCanceledBy(u *User) bool {
	return c.IsRequester(u) && c.State == StatePending && (c.ApprovedCount() == 0 || c.ValidationStatus == ValidationStale)
}

// ErrCannotCancel is PostHog's refusal of a cancellation.
var ErrCannotCancel = &Error{Kind: Forbidden, Code: "permission_denied", Detail: "You cannot cancel this change request"}

// ErrAlreadyVoted refuses a second vote of one user.
var ErrAlreadyVoted = &Error{Kind: Invalid, Code: "already_voted", Detail: "You have already voted on this change request."}

// ErrReasonRequired refuses a rejection without a reason.
var ErrReasonRequired = FieldError("reason", "required", "A reason is required for rejection.")

// ErrPolicyExists refuses a second policy for one action of a project (PostHog's message).
var ErrPolicyExists = &Error{Kind: Invalid, Code: "invalid_input", Detail: "A policy for this action already exists. You can edit the existing policy instead."}

// ApprovalRequiredError is what a gated write of a flag returns instead of writing it: the
// change request it filed (Code "approval_required") or the pending one that already asks
// for the same change ("change_request_pending"). The flag is unchanged; the request, when
// filed, is stored with the write's transaction. The API answers it 409.
type ApprovalRequiredError struct {
	Code              string
	Message           string
	ChangeRequest     *ChangeRequest
	RequiredApprovers *ApproverConfig // nil for change_request_pending
}

func (e *ApprovalRequiredError) Error() string {
	return e.Code + ": " + e.Message + " (change request " + e.ChangeRequest.ID + ")"
}

// Unwrap classifies the error as a conflict, so that what handles errors by kind (the
// scheduler, the console) does not take it for an internal one.
func (e *ApprovalRequiredError) Unwrap() error {
	return &Error{Kind: Conflict, Code: e.Code, Detail: e.Message}
}

// ConflictingPolicy names a policy of a PolicyConflictError.
type ConflictingPolicy struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// PolicyConflictError refuses a write of a flag that more than one policy would gate: one
// change request carries one action's approval, so the change must be split.
type PolicyConflictError struct {
	Policies []ConflictingPolicy
}

// Messages of a PolicyConflictError (PostHog's).
const (
	PolicyConflictMessage  = "This change matches multiple approval policies"
	PolicyConflictGuidance = "Split your changes into separate API calls to address each policy independently"
)

func (e *PolicyConflictError) Error() string { return "policy_conflict: " + PolicyConflictMessage }

// Unwrap classifies the error as an invalid request.
func (e *PolicyConflictError) Unwrap() error {
	return &Error{Kind: Invalid, Code: "policy_conflict", Detail: PolicyConflictMessage}
}

// ApprovalPolicyFilter selects a project's policies.
type ApprovalPolicyFilter struct {
	ProjectID     int64
	ActionKey     string
	Enabled       *bool
	Limit, Offset int
}

// ChangeRequestFilter selects a project's change requests (PostHog's filters).
type ChangeRequestFilter struct {
	ProjectID     int64
	States        []string
	ActionKey     string
	Requester     *int64
	ResourceType  string
	ResourceID    string
	Limit, Offset int
}

// Decision is the outcome of a vote or a cancellation: the request's resulting state
// (Status), what happened, the request, and, when the vote applied it, the flag's id and
// new version.
type Decision struct {
	Status        string
	Message       string
	ChangeRequest *ChangeRequest
	Result        *ApplyResult
}

// ApplyResult is what applying a change request made (PostHog's result_data).
type ApplyResult struct {
	ResourceID      int64 `json:"resource_id"`
	ResourceVersion int   `json:"resource_version"`
}

// ApprovalService manages a project's approval policies and change requests. Its calls act
// as the user of the context (CurrentUser): members of the project's organisation read
// policies and requests; only its admins write policies (CanAdminOrg); voting needs what
// ApproveRefusal allows and cancelling what CanBeCanceledBy does. A project out of reach is
// PermissionDenied, whether it exists or not.
type ApprovalService interface {
	FindApprovalPolicies(ctx context.Context, filter ApprovalPolicyFilter) ([]*ApprovalPolicy, int, error)
	FindApprovalPolicyByID(ctx context.Context, projectID int64, id string) (*ApprovalPolicy, error)
	CreateApprovalPolicy(ctx context.Context, projectID int64, upd ApprovalPolicyUpdate) (*ApprovalPolicy, error)
	UpdateApprovalPolicy(ctx context.Context, projectID int64, id string, upd ApprovalPolicyUpdate) (*ApprovalPolicy, error)
	DeleteApprovalPolicy(ctx context.Context, projectID int64, id string) error
	// FindChangeRequests returns a page of the project's requests, newest first, expiring
	// those overdue first.
	FindChangeRequests(ctx context.Context, filter ChangeRequestFilter) ([]*ChangeRequest, int, error)
	FindChangeRequestByID(ctx context.Context, projectID int64, id string) (*ChangeRequest, error)
	// ApproveChangeRequest records the user's approval; at quorum it applies the change in
	// the same transaction, as its requester, and answers "applied" or "failed".
	ApproveChangeRequest(ctx context.Context, projectID int64, id, reason string) (*Decision, error)
	// RejectChangeRequest records the user's rejection, which rejects the request.
	RejectChangeRequest(ctx context.Context, projectID int64, id, reason string) (*Decision, error)
	// CancelChangeRequest withdraws the user's own request.
	CancelChangeRequest(ctx context.Context, projectID int64, id, reason string) (*Decision, error)
}

// ChangeRequestEvent is a change request as its webhook events deliver it.
type ChangeRequestEvent struct {
	ID               string  `json:"id"`
	ActionKey        string  `json:"action_key"`
	ResourceType     string  `json:"resource_type"`
	ResourceID       *string `json:"resource_id"`
	Description      string  `json:"description"`
	State            string  `json:"state"`
	ValidationStatus string  `json:"validation_status"`
	ApplyError       string  `json:"apply_error"`
	SnapshotVersion  int64   `json:"snapshot_version"`
	Live             bool    `json:"live"`
}

// Event is the request as its webhook events deliver it.
func (c *ChangeRequest) Event() ChangeRequestEvent {
	return ChangeRequestEvent{ID: c.ID, ActionKey: c.ActionKey, ResourceType: c.ResourceType, ResourceID: c.ResourceID,
		Description: c.IntentDisplay.Description, State: c.State, ValidationStatus: c.ValidationStatus, ApplyError: c.ApplyError,
		SnapshotVersion: c.SnapshotVersion, Live: c.LiveAt != nil}
}

// ChangeRequestUpkeep is the upkeep of change requests that no user asks for, which every
// control-plane replica runs (controlplane/approvalwatch) with system-level access: it
// expires overdue requests and records when an applied request is live on every connected
// edge, reporting it (change_request.live). Each is done once however many replicas run.
type ChangeRequestUpkeep interface {
	// ExpireChangeRequests expires the overdue pending requests and returns how many.
	ExpireChangeRequests(ctx context.Context) (int, error)
	// ConfirmLiveChangeRequests marks live the applied requests whose version every connected
	// edge of their project serves, and returns how many.
	ConfirmLiveChangeRequests(ctx context.Context) (int, error)
}

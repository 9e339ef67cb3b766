// Package controlplane holds the control plane's domain: organisations, users, projects, API
// keys and their scopes, feature flags and the activity log, copying flags between projects
// (flagcopy.go), cohorts and dashboards,
// annotations, roles and flag role access, captured events with the persons and groups
// ingestion makes of them, the project snapshots edges serve, and the one error type of the
// control plane (errors.go). It also declares the service interfaces that adapters
// implement (postgres) or consume (httpapi, syncserver, flageval). It performs no I/O.
package controlplane

import (
	"context"
	"slices"
	"strings"
	"time"
)

// Organisation roles of a user.
const (
	OrgRoleMember = "member"
	OrgRoleAdmin  = "admin"
)

// Organization owns users, projects and roles.
type Organization struct {
	ID        int64
	UUID      string
	Name      string
	CreatedAt time.Time
}

// User is a person who manages projects; its summary is the API's user object (created_by,
// last_modified_by).
type User struct {
	ID              int64
	UUID            string
	DistinctID      string
	FirstName       string
	LastName        string
	Email           string
	IsEmailVerified bool
	OrganizationID  int64
	OrgRole         string
}

// IsAdmin reports whether the user administers its organisation.
func (u *User) IsAdmin() bool { return u.OrgRole == OrgRoleAdmin }

// Name is the user's name for display, the email when unnamed.
func (u *User) Name() string {
	if n := strings.TrimSpace(u.FirstName + " " + u.LastName); n != "" {
		return n
	}
	return u.Email
}

// GroupType is a named group type of a project and its index (0–4).
type GroupType struct {
	GroupType string `json:"group_type"`
	Index     int    `json:"group_type_index"`
}

// Project is an analytics project: it owns flags, annotations and captured data.
type Project struct {
	ID               int64
	UUID             string
	OrganizationID   int64
	OrganizationUUID string
	Name             string
	APIToken         string
	SecretAPIToken   string
	Timezone         string
	CreatedAt        time.Time
	GroupTypes       []GroupType
	ClientConfig     ClientConfig
	// StoreEvents is false when the project's events are only forwarded to its event
	// destinations, not stored (persons and groups are still updated: flags read them).
	StoreEvents bool
}

// ClientConfig holds a project's switches of the configuration browser SDKs get (PostHog's
// names). Session recording and console-log capture are stored but stay off at the edges:
// there is no recording endpoint.
type ClientConfig struct {
	AutocaptureOptOut          bool `json:"autocapture_opt_out"`
	SessionRecordingOptIn      bool `json:"session_recording_opt_in"`
	HeatmapsOptIn              bool `json:"heatmaps_opt_in"`
	CaptureConsoleLogOptIn     bool `json:"capture_console_log_opt_in"`
	CapturePerformanceOptIn    bool `json:"capture_performance_opt_in"`
	AutocaptureExceptionsOptIn bool `json:"autocapture_exceptions_opt_in"`
}

// ProjectUpdate holds the writable fields of a project; nil means unchanged.
type ProjectUpdate struct {
	Name     *string
	Timezone *string

	AutocaptureOptOut          *bool
	SessionRecordingOptIn      *bool
	HeatmapsOptIn              *bool
	CaptureConsoleLogOptIn     *bool
	CapturePerformanceOptIn    *bool
	AutocaptureExceptionsOptIn *bool

	// StoreEvents is changed by organisation admins only (CanAdminOrg): turned off, the
	// project's events are kept nowhere but its destinations' queues.
	StoreEvents *bool
}

// Scope names an object and an access level, e.g. "feature_flag:read". "*" grants all.
type Scope string

// Scopes a personal API key may carry.
const (
	ScopeAll             Scope = "*"
	ScopeFlagRead        Scope = "feature_flag:read"
	ScopeFlagWrite       Scope = "feature_flag:write"
	ScopeActivityLogRead Scope = "activity_log:read"
	ScopeProjectRead     Scope = "project:read"
	ScopeProjectWrite    Scope = "project:write"
	ScopeAnnotationRead  Scope = "annotation:read"
	ScopeAnnotationWrite Scope = "annotation:write"
	ScopeCohortRead      Scope = "cohort:read"
	ScopeCohortWrite     Scope = "cohort:write"
	ScopeRoleRead        Scope = "role:read"
	ScopeRoleWrite       Scope = "role:write"
	ScopeEventRead       Scope = "event:read"
	ScopePersonRead      Scope = "person:read"
	// ScopeFeatureRead and ScopeFeatureWrite are for early access features.
	ScopeFeatureRead  Scope = "early_access_feature:read"
	ScopeFeatureWrite Scope = "early_access_feature:write"
	// ScopeWebhookRead and ScopeWebhookWrite are for a project's webhooks and their deliveries.
	ScopeWebhookRead  Scope = "webhook:read"
	ScopeWebhookWrite Scope = "webhook:write"
	// ScopeApprovalsRead and ScopeApprovalsWrite are for approval policies and change
	// requests (PostHog's "approvals" scope object).
	ScopeApprovalsRead  Scope = "approvals:read"
	ScopeApprovalsWrite Scope = "approvals:write"
	// ScopeDestinationRead and ScopeDestinationWrite are for a project's event destinations.
	ScopeDestinationRead  Scope = "event_destination:read"
	ScopeDestinationWrite Scope = "event_destination:write"
)

// ScopeObjects are the objects a scope may name.
var ScopeObjects = []string{"feature_flag", "annotation", "activity_log", "project", "cohort", "person", "event", "role",
	"personal_api_key", "user", "organization_member", "early_access_feature", "webhook", "approvals",
	"event_destination"}

// ValidScope reports whether s is "*" or "<object>:read|write" for a known object.
func ValidScope(s string) bool {
	if s == string(ScopeAll) {
		return true
	}
	obj, level, ok := strings.Cut(s, ":")
	return ok && (level == "read" || level == "write") && slices.Contains(ScopeObjects, obj)
}

// APIKey is an authenticated personal API key and the user it belongs to.
type APIKey struct {
	ID       int64
	Label    string
	User     User
	Scopes   []string
	Projects []int64 // the projects the key is limited to; nil means every project of the organisation
}

// HasScope reports whether the key grants scope; write implies read.
func (k *APIKey) HasScope(scope Scope) bool {
	obj, level, _ := strings.Cut(string(scope), ":")
	for _, s := range k.Scopes {
		if s == string(ScopeAll) || s == string(scope) {
			return true
		}
		if level == "read" && s == obj+":write" {
			return true
		}
	}
	return false
}

// Reaches reports whether the key may address the project.
func (k *APIKey) Reaches(p *Project) bool {
	if p.OrganizationID != k.User.OrganizationID {
		return false
	}
	return k.Projects == nil || slices.Contains(k.Projects, p.ID)
}

// ReachesOrganization reports whether the key may act on its organisation as a whole (its
// members, invites, roles, new projects): only a key not limited to some projects may, since
// what is done there reaches every project (an invited admin sees them all).
func (k *APIKey) ReachesOrganization() bool { return k.Projects == nil }

// ErrKeyLimitedToProjects refuses a key limited to some projects on a route of the whole
// organisation; the detail is PostHog's.
var ErrKeyLimitedToProjects = &Error{Kind: Forbidden, Code: "permission_denied",
	Detail: "API key with scoped projects are only supported on project-based views."}

// NewKey is a freshly issued personal API key; Secret is shown once and never stored.
type NewKey struct {
	APIKey
	Secret string
}

// AuthService authenticates credentials.
type AuthService interface {
	// AuthenticatePersonalKey returns the key whose secret is given, or a BadCredentials error.
	AuthenticatePersonalKey(ctx context.Context, secret string) (*APIKey, error)
}

// ProjectFilter selects projects.
type ProjectFilter struct {
	OrganizationID int64
	IDs            []int64 // nil means any
	Limit, Offset  int
}

// ProjectService manages projects. Its calls act as the user of the context (CurrentUser),
// NotAuthenticated without one, who reaches the projects of their organisation (CanReadOrg):
// a project the user does not reach is PermissionDenied whether it exists or not, so that
// ids of other organisations' projects cannot be probed.
type ProjectService interface {
	FindProjectByID(ctx context.Context, id int64) (*Project, error)
	// FindProjectByToken returns the project with the public token (phc_…). It needs no
	// user: the token admits whoever holds it (the SDK definitions), and what a user may then
	// see of the project is the caller's check.
	FindProjectByToken(ctx context.Context, token string) (*Project, error)
	// FindProjects returns a page of the organisation's projects, to its members.
	FindProjects(ctx context.Context, filter ProjectFilter) ([]*Project, int, error)
	// CreateProject creates a project in the organisation, for its members.
	CreateProject(ctx context.Context, orgID int64, name string) (*Project, error)
	UpdateProject(ctx context.Context, id int64, upd ProjectUpdate) (*Project, error)
}

// Services are the control plane's services that act for a user, as one value: the stores
// build them (postgres.NewServices) and check, in their transactions, that the user of the
// context may do what is asked (access.go); the management API, the console and the scheduler
// call them.
type Services struct {
	Auth         AuthService
	Projects     ProjectService
	Flags        FlagService
	FlagCopies   FlagCopyService
	Activity     ActivityService
	Analytics    EventReader // events, persons and groups
	Annotations  AnnotationService
	Roles        RoleService
	Cohorts      CohortService
	EarlyAccess  EarlyAccessFeatureService
	Dashboards   DashboardService
	Users        UserService
	Keys         KeyService
	Sessions     SessionService
	Schedules    ScheduledChangeService
	Webhooks     WebhookService
	Approvals    ApprovalService
	ReleasePlans ReleasePlanService
	// EventDestinations are where the projects' events are forwarded (to PostHog).
	EventDestinations EventDestinationService
}

// TimeLayout is how the API and webhook deliveries write times: ISO 8601 in UTC with
// microseconds, as PostHog does.
const TimeLayout = "2006-01-02T15:04:05.000000Z"

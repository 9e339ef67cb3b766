package controlplane

import (
	"context"
	"slices"
	"strings"
	"time"
)

// Organisation membership levels as PostHog's API numbers them (members list, invites).
const (
	MembershipLevelMember = 1
	MembershipLevelAdmin  = 8
)

// MembershipLevel returns the API's level number for an organisation role.
func MembershipLevel(orgRole string) int {
	if orgRole == OrgRoleAdmin {
		return MembershipLevelAdmin
	}
	return MembershipLevelMember
}

// Password length bounds: eight characters keep out the trivial ones; bcrypt reads at most
// 72 bytes, and a longer password would be silently truncated.
const (
	MinPasswordLength = 8
	MaxPasswordBytes  = 72
)

// ValidatePassword checks a new password's length.
func ValidatePassword(password string) error {
	switch {
	case len([]rune(password)) < MinPasswordLength:
		return FieldError("password", "password_too_short", "This password is too short. It must contain at least 8 characters.")
	case len(password) > MaxPasswordBytes:
		return FieldError("password", "password_too_long", "This password is too long. It may contain at most 72 bytes.")
	}
	return nil
}

// ValidEmail reports whether s looks like an email address: something, "@", a domain.
func ValidEmail(s string) bool {
	local, domain, ok := strings.Cut(s, "@")
	return ok && local != "" && strings.Contains(domain, ".") && !strings.ContainsAny(s, " \t\r\n<>")
}

// ErrBadLogin is returned for an unknown email or a wrong password alike, so that a login
// form does not reveal which accounts exist.
var ErrBadLogin = &Error{Kind: BadCredentials, Code: "invalid_credentials", Detail: "Invalid email or password."}

// Member is a user of an organisation as the members list shows it.
type Member struct {
	User User
	// JoinedAt is when the user was created in the organisation.
	JoinedAt time.Time
	// HasPassword reports whether the user can log in to the console.
	HasPassword bool
}

// Invite is a new member and the one-time token that lets them choose a password.
type Invite struct {
	Member
	// PasswordToken is shown once, in the invite's answer; only its hash is stored.
	PasswordToken string
	ExpiresAt     time.Time
	CreatedBy     *User
}

// InviteRequest is what an admin gives to add a member.
type InviteRequest struct {
	Email     string
	FirstName string
	OrgRole   string
}

// Validate checks the request and fills defaults.
func (r *InviteRequest) Validate() error {
	r.Email = strings.TrimSpace(r.Email)
	if r.Email == "" {
		return FieldError("target_email", "required", "This field is required.")
	}
	if !ValidEmail(r.Email) {
		return FieldError("target_email", "invalid", "Enter a valid email address.")
	}
	if r.OrgRole == "" {
		r.OrgRole = OrgRoleMember
	}
	if r.OrgRole != OrgRoleMember && r.OrgRole != OrgRoleAdmin {
		return FieldError("level", "invalid_choice", "Use 1 (member) or 8 (admin).")
	}
	if r.FirstName == "" {
		r.FirstName, _, _ = strings.Cut(r.Email, "@")
	}
	return nil
}

// UserService manages the users of organisations: membership, passwords and logins. The
// membership calls act as the user of the context (CurrentUser) and are NotAuthenticated
// without one; the password calls establish who the user is and need none.
type UserService interface {
	// FindOrganization returns the organisation with the id, when it is the organisation of
	// the user ctx acts as (CanReadOrg), else PermissionDenied.
	FindOrganization(ctx context.Context, id int64) (*Organization, error)
	// FindMembers returns a page of the organisation's active users, oldest first, and the
	// total, to its members (CanReadOrg), else PermissionDenied.
	FindMembers(ctx context.Context, orgID int64, limit, offset int) ([]*Member, int, error)
	// InviteMember creates a user in the organisation of the user ctx acts as (or brings back
	// a removed one) and issues a one-time set-password token. Only an admin of the
	// organisation may (CanAdminOrg), else PermissionDenied.
	InviteMember(ctx context.Context, req InviteRequest) (*Invite, error)
	// RemoveOrganizationMember removes a user from the organisation of the user ctx acts as:
	// their keys stop working at once (at the edges too), their sessions end, their role
	// memberships go and they can no longer log in. Only an admin of the organisation may
	// (CanAdminOrg), else PermissionDenied.
	RemoveOrganizationMember(ctx context.Context, userUUID string) error
	// SetPassword sets the password of the user with the email.
	SetPassword(ctx context.Context, email, password string) (*User, error)
	// SetPasswordWithToken uses a one-time token to set its user's password.
	SetPasswordWithToken(ctx context.Context, token, password string) (*User, error)
	// CheckPassword returns the active user with the email when the password is theirs, else
	// ErrBadLogin.
	CheckPassword(ctx context.Context, email, password string) (*User, error)
}

// Session is a logged-in console user.
type Session struct {
	User User
	// CSRFToken is the session's anti-forgery token: every form posts it back.
	CSRFToken string
	ExpiresAt time.Time
}

// SessionService keeps console sessions server-side; the cookie holds only a random token.
type SessionService interface {
	// CreateSession starts a session for the user and returns it with its cookie token.
	CreateSession(ctx context.Context, userID int64) (*Session, string, error)
	// FindSession returns the live session of a cookie token, or NotAuthenticated.
	FindSession(ctx context.Context, token string) (*Session, error)
	// DeleteSession ends the session of a cookie token; ending an unknown one is no error.
	DeleteSession(ctx context.Context, token string) error
}

// PersonalKey is a personal API key as its owner sees it: never its secret.
type PersonalKey struct {
	ID                  int64
	UserID              int64
	Label               string
	MaskValue           string
	Scopes              []string
	ScopedTeams         []int64 // nil: every project of the organisation
	ScopedOrganizations []string
	CreatedAt           time.Time
	LastUsedAt          *time.Time
}

// KeyUpdate holds the writable fields of a personal key; nil means unchanged.
type KeyUpdate struct {
	Label               *string
	Scopes              *[]string
	ScopedTeams         *[]int64
	ScopedOrganizations *[]string
}

// MaxKeysPerUser bounds the keys one user may hold, as PostHog does.
const MaxKeysPerUser = 10

// Validate checks the update against the caller: scopes must be known and, so that a key
// cannot mint a stronger one, within the caller's own.
func (u *KeyUpdate) Validate(creating bool, caller *APIKey) error {
	if creating && u.Label == nil {
		return FieldError("label", "required", "This field is required.")
	}
	if u.Label != nil {
		if strings.TrimSpace(*u.Label) == "" {
			return FieldError("label", "blank", "This field may not be blank.")
		}
		if len(*u.Label) > 40 {
			return FieldError("label", "max_length", "Ensure this field has no more than 40 characters.")
		}
	}
	if creating && u.Scopes == nil {
		return FieldError("scopes", "required", "This field is required.")
	}
	if u.Scopes != nil {
		if len(*u.Scopes) == 0 {
			return FieldError("scopes", "required", "A key needs at least one scope.")
		}
		for _, s := range *u.Scopes {
			if !ValidScope(s) {
				return FieldError("scopes", "invalid_input", "Invalid scope: "+s)
			}
			if caller != nil && !caller.Covers(s) {
				return FieldError("scopes", "invalid_input", "A key cannot grant the scope "+s+", which the calling key lacks.")
			}
		}
	}
	if u.ScopedTeams != nil && caller != nil && caller.Projects != nil {
		if len(*u.ScopedTeams) == 0 {
			return FieldError("scoped_teams", "invalid_input", "The calling key is limited to projects: limit the new key too.")
		}
		for _, id := range *u.ScopedTeams {
			if !slices.Contains(caller.Projects, id) {
				return FieldError("scoped_teams", "invalid_input", "You must be a member of all teams that you are scoping the key to.")
			}
		}
	} else if creating && u.ScopedTeams == nil && caller != nil && caller.Projects != nil {
		return FieldError("scoped_teams", "invalid_input", "The calling key is limited to projects: limit the new key too.")
	}
	return nil
}

// Covers reports whether the key holds scope s itself (or "*"): "*" is covered only by "*",
// and a read scope also by the object's write scope.
func (k *APIKey) Covers(s string) bool {
	if s == string(ScopeAll) {
		return slices.Contains(k.Scopes, string(ScopeAll))
	}
	return k.HasScope(Scope(s))
}

// KeyService manages the personal API keys of the user the context acts as (CurrentUser):
// keys are their owner's alone (CanManageKey), admins included, and another user's key is not
// found, so that key ids cannot be probed. Every method is NotAuthenticated without a user.
// Every change that alters which keys reach a project bumps that project's snapshot, so edges
// learn of revocations like of flag changes. What a calling key may grant (KeyUpdate.Validate
// with the caller) is the API's check, where the key is.
type KeyService interface {
	// FindKeys returns the user's keys, newest first.
	FindKeys(ctx context.Context) ([]*PersonalKey, error)
	// FindKeyByID returns one of the user's keys.
	FindKeyByID(ctx context.Context, id int64) (*PersonalKey, error)
	// CreateKey issues a key for the user and returns it with its secret, shown once.
	CreateKey(ctx context.Context, upd KeyUpdate) (*PersonalKey, string, error)
	// UpdateKey changes one of the user's keys.
	UpdateKey(ctx context.Context, id int64, upd KeyUpdate) (*PersonalKey, error)
	// DeleteKey revokes one of the user's keys.
	DeleteKey(ctx context.Context, id int64) error
}

// Scopes of the user, key and member endpoints.
const (
	ScopeKeyRead     Scope = "personal_api_key:read"
	ScopeKeyWrite    Scope = "personal_api_key:write"
	ScopeUserRead    Scope = "user:read"
	ScopeMemberRead  Scope = "organization_member:read"
	ScopeMemberWrite Scope = "organization_member:write"
)

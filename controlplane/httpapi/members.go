package httpapi

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/flagedge/flagedge/controlplane"
)

// memberJSON is an organisation member in PostHog's shape.
type memberJSON struct {
	ID            string   `json:"id"`
	User          userJSON `json:"user"`
	Level         int      `json:"level"`
	JoinedAt      timeJSON `json:"joined_at"`
	UpdatedAt     timeJSON `json:"updated_at"`
	HasPassword   bool     `json:"has_password"`
	Is2FAEnabled  bool     `json:"is_2fa_enabled"`
	HasSocialAuth bool     `json:"has_social_auth"`
}

func newMemberJSON(m *controlplane.Member) memberJSON {
	return memberJSON{ID: m.User.UUID, User: *newUserJSON(&m.User), Level: controlplane.MembershipLevel(m.User.OrgRole),
		JoinedAt: timeJSON(m.JoinedAt), UpdatedAt: timeJSON(m.JoinedAt), HasPassword: m.HasPassword}
}

func (s *Server) handleListMembers(r *http.Request, key *controlplane.APIKey) (answer, error) {
	limit, offset, err := pageParams(r)
	if err != nil {
		return answer{}, err
	}
	list, total, err := s.cfg.Users.FindMembers(r.Context(), key.User.OrganizationID, limit, offset)
	if err != nil {
		return answer{}, err
	}
	out := make([]memberJSON, len(list))
	for i, m := range list {
		out[i] = newMemberJSON(m)
	}
	return ok(s.newPage(r, total, limit, offset, out)), nil
}

// handleRemoveMember removes a user from the organisation (admins only, by withOrg).
func (s *Server) handleRemoveMember(r *http.Request, key *controlplane.APIKey) (answer, error) {
	if err := s.cfg.Users.RemoveOrganizationMember(r.Context(), r.PathValue("user")); err != nil {
		return answer{}, err
	}
	return noContent(), nil
}

// inviteJSON is an invitation in PostHog's shape, plus the one-time link to set a password:
// no mail is sent, the admin passes the link on.
type inviteJSON struct {
	ID             string    `json:"id"`
	TargetEmail    string    `json:"target_email"`
	FirstName      string    `json:"first_name"`
	Level          int       `json:"level"`
	IsExpired      bool      `json:"is_expired"`
	Emailed        bool      `json:"emailed"`
	CreatedBy      *userJSON `json:"created_by"`
	CreatedAt      timeJSON  `json:"created_at"`
	UpdatedAt      timeJSON  `json:"updated_at"`
	ExpiresAt      timeJSON  `json:"expires_at"`
	Message        *string   `json:"message"`
	User           userJSON  `json:"user"`
	SetPasswordURL string    `json:"set_password_url"`
}

// handleInvite creates a member (admins only, by withOrg) and answers a set-password link.
func (s *Server) handleInvite(r *http.Request, key *controlplane.APIKey) (answer, error) {
	f, err := decodeObject(r)
	if err != nil {
		return answer{}, err
	}
	var req controlplane.InviteRequest
	var email, firstName *string
	var level *int64
	for _, step := range []error{
		f.str("target_email", &email),
		f.str("first_name", &firstName),
		decode(f, "level", &level, "a membership level (1 or 8)"),
	} {
		if step != nil {
			return answer{}, step
		}
	}
	if email != nil {
		req.Email = *email
	}
	if firstName != nil {
		req.FirstName = *firstName
	}
	if level != nil {
		switch *level {
		case controlplane.MembershipLevelMember:
			req.OrgRole = controlplane.OrgRoleMember
		case controlplane.MembershipLevelAdmin:
			req.OrgRole = controlplane.OrgRoleAdmin
		default:
			return answer{}, controlplane.FieldError("level", "invalid_choice", "Use 1 (member) or 8 (admin).")
		}
	}
	inv, err := s.cfg.Users.InviteMember(r.Context(), req)
	if err != nil {
		return answer{}, err
	}
	return created(inviteJSON{
		ID: inv.User.UUID, TargetEmail: inv.User.Email, FirstName: inv.User.FirstName, Level: controlplane.MembershipLevel(inv.User.OrgRole),
		CreatedBy: newUserJSON(inv.CreatedBy), CreatedAt: timeJSON(inv.JoinedAt), UpdatedAt: timeJSON(inv.JoinedAt),
		ExpiresAt: timeJSON(inv.ExpiresAt), User: *newUserJSON(&inv.User),
		SetPasswordURL: s.baseURL(r) + "/set-password?token=" + url.QueryEscape(inv.PasswordToken),
	}), nil
}

// baseURL is the scheme and host of absolute URLs: the public URL, else the request's.
func (s *Server) baseURL(r *http.Request) string {
	if base := strings.TrimRight(s.cfg.PublicURL, "/"); base != "" {
		return base
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

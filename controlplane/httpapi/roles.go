package httpapi

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/flagedge/flagedge/controlplane"
)

// roleJSON is the API's role object. members and associated_flags are strings, as PostHog
// types them: the members' user uuids and the ids of the flags the role has access to,
// comma-separated (role_memberships lists the members in full).
type roleJSON struct {
	ID                      string    `json:"id"`
	Name                    string    `json:"name"`
	FeatureFlagsAccessLevel int       `json:"feature_flags_access_level"`
	CreatedAt               timeJSON  `json:"created_at"`
	CreatedBy               *userJSON `json:"created_by"`
	Members                 string    `json:"members"`
	AssociatedFlags         string    `json:"associated_flags"`
}

func newRoleJSON(r *controlplane.Role) roleJSON {
	flags := make([]string, len(r.FlagIDs))
	for i, id := range r.FlagIDs {
		flags[i] = strconv.FormatInt(id, 10)
	}
	return roleJSON{ID: r.ID, Name: r.Name, FeatureFlagsAccessLevel: r.FeatureFlagsAccessLevel, CreatedAt: timeJSON(r.CreatedAt),
		CreatedBy: newUserJSON(r.CreatedBy), Members: strings.Join(r.MemberUUIDs, ","), AssociatedFlags: strings.Join(flags, ",")}
}

type membershipJSON struct {
	ID       string   `json:"id"`
	RoleID   string   `json:"role_id"`
	User     userJSON `json:"user"`
	JoinedAt timeJSON `json:"joined_at"`
}

func newMembershipJSON(m *controlplane.RoleMembership) membershipJSON {
	return membershipJSON{ID: m.ID, RoleID: m.RoleID, User: *newUserJSON(&m.User), JoinedAt: timeJSON(m.JoinedAt)}
}

// withOrg authenticates, checks the scope, that the key is not limited to some projects (what
// is done to the organisation reaches all of them) and that the path's organisation
// ("@current", or the key's organisation's uuid) is the key's; the services decide who may
// write (admins).
func (s *Server) withOrg(scope controlplane.Scope, h keyHandler) handler {
	return s.withKey(scope, func(r *http.Request, key *controlplane.APIKey) (answer, error) {
		if !key.ReachesOrganization() {
			return answer{}, controlplane.ErrKeyLimitedToProjects
		}
		if org := r.PathValue("org"); org != "@current" && !s.isKeysOrg(r, key, org) {
			return answer{}, controlplane.ErrPermissionDenied
		}
		return h(r, key)
	})
}

// isKeysOrg reports whether org names the key's organisation by uuid.
func (s *Server) isKeysOrg(r *http.Request, key *controlplane.APIKey, org string) bool {
	projects, _, err := s.cfg.Projects.FindProjects(r.Context(), controlplane.ProjectFilter{OrganizationID: key.User.OrganizationID, Limit: 1})
	return err == nil && len(projects) == 1 && strings.EqualFold(projects[0].OrganizationUUID, org)
}

func (s *Server) handleListRoles(r *http.Request, key *controlplane.APIKey) (answer, error) {
	limit, offset, err := pageParams(r)
	if err != nil {
		return answer{}, err
	}
	list, total, err := s.cfg.Roles.FindRoles(r.Context(), key.User.OrganizationID, limit, offset)
	if err != nil {
		return answer{}, err
	}
	out := make([]roleJSON, len(list))
	for i, role := range list {
		out[i] = newRoleJSON(role)
	}
	return ok(s.newPage(r, total, limit, offset, out)), nil
}

func decodeRoleUpdate(r *http.Request) (controlplane.RoleUpdate, error) {
	var u controlplane.RoleUpdate
	f, err := decodeObject(r)
	if err != nil {
		return u, err
	}
	if err := f.str("name", &u.Name); err != nil {
		return u, err
	}
	var level *int64
	if err := decode(f, "feature_flags_access_level", &level, "a valid integer"); err != nil {
		return u, err
	}
	if level != nil {
		l := int(*level)
		u.FeatureFlagsAccessLevel = &l
	}
	return u, nil
}

func (s *Server) handleCreateRole(r *http.Request, key *controlplane.APIKey) (answer, error) {
	upd, err := decodeRoleUpdate(r)
	if err != nil {
		return answer{}, err
	}
	role, err := s.cfg.Roles.CreateRole(r.Context(), upd)
	if err != nil {
		return answer{}, err
	}
	return created(newRoleJSON(role)), nil
}

func (s *Server) handleGetRole(r *http.Request, key *controlplane.APIKey) (answer, error) {
	role, err := s.cfg.Roles.FindRoleByID(r.Context(), key.User.OrganizationID, r.PathValue("role"))
	if err != nil {
		return answer{}, err
	}
	return ok(newRoleJSON(role)), nil
}

func (s *Server) handlePatchRole(r *http.Request, key *controlplane.APIKey) (answer, error) {
	upd, err := decodeRoleUpdate(r)
	if err != nil {
		return answer{}, err
	}
	role, err := s.cfg.Roles.UpdateRole(r.Context(), key.User.OrganizationID, r.PathValue("role"), upd)
	if err != nil {
		return answer{}, err
	}
	return ok(newRoleJSON(role)), nil
}

func (s *Server) handleDeleteRole(r *http.Request, key *controlplane.APIKey) (answer, error) {
	if err := s.cfg.Roles.DeleteRole(r.Context(), key.User.OrganizationID, r.PathValue("role")); err != nil {
		return answer{}, err
	}
	return noContent(), nil
}

func (s *Server) handleListMemberships(r *http.Request, key *controlplane.APIKey) (answer, error) {
	limit, offset, err := pageParams(r)
	if err != nil {
		return answer{}, err
	}
	list, total, err := s.cfg.Roles.FindMemberships(r.Context(), key.User.OrganizationID, r.PathValue("role"), limit, offset)
	if err != nil {
		return answer{}, err
	}
	out := make([]membershipJSON, len(list))
	for i, m := range list {
		out[i] = newMembershipJSON(m)
	}
	return ok(s.newPage(r, total, limit, offset, out)), nil
}

func (s *Server) handleAddMembership(r *http.Request, key *controlplane.APIKey) (answer, error) {
	f, err := decodeObject(r)
	if err != nil {
		return answer{}, err
	}
	var userUUID *string
	if err := f.str("user_uuid", &userUUID); err != nil {
		return answer{}, err
	}
	if userUUID == nil {
		return answer{}, controlplane.FieldError("user_uuid", "required", "This field is required.")
	}
	m, err := s.cfg.Roles.AddMember(r.Context(), key.User.OrganizationID, r.PathValue("role"), *userUUID)
	if err != nil {
		return answer{}, err
	}
	return created(newMembershipJSON(m)), nil
}

func (s *Server) handleRemoveMembership(r *http.Request, key *controlplane.APIKey) (answer, error) {
	if err := s.cfg.Roles.RemoveMember(r.Context(), key.User.OrganizationID, r.PathValue("role"), r.PathValue("id")); err != nil {
		return answer{}, err
	}
	return noContent(), nil
}

// roleAccessJSON is the API's flag role access object.
type roleAccessJSON struct {
	ID          int64    `json:"id"`
	FeatureFlag flagJSON `json:"feature_flag"`
	Role        roleJSON `json:"role"`
	RoleID      string   `json:"role_id"`
	AddedAt     timeJSON `json:"added_at"`
	UpdatedAt   timeJSON `json:"updated_at"`
}

func (s *Server) handleListRoleAccess(r *http.Request, c *call) (answer, error) {
	flag, err := s.flagFromPath(r, c)
	if err != nil {
		return answer{}, err
	}
	limit, offset, err := pageParams(r)
	if err != nil {
		return answer{}, err
	}
	list, total, err := s.cfg.Roles.FindRoleAccess(r.Context(), c.project.ID, flag.ID, limit, offset)
	if err != nil {
		return answer{}, err
	}
	fj := newFlagJSON(flag, flag.CanEdit)
	out := make([]roleAccessJSON, len(list))
	for i, a := range list {
		out[i] = newRoleAccessJSON(a, fj)
	}
	return ok(s.newPage(r, total, limit, offset, out)), nil
}

// answerRoleAccess answers the flag's access by a role, with the flag as the caller sees it.
func (s *Server) answerRoleAccess(r *http.Request, c *call, flag *controlplane.Flag, a *controlplane.RoleAccess, status int) (answer, error) {
	fj, err := s.flagJSON(r, c, flag)
	if err != nil {
		return answer{}, err
	}
	return answer{status: status, value: newRoleAccessJSON(a, fj)}, nil
}

func newRoleAccessJSON(a *controlplane.RoleAccess, flag flagJSON) roleAccessJSON {
	return roleAccessJSON{ID: a.ID, FeatureFlag: flag, Role: newRoleJSON(&a.Role), RoleID: a.Role.ID,
		AddedAt: timeJSON(a.AddedAt), UpdatedAt: timeJSON(a.UpdatedAt)}
}

func (s *Server) handleCreateRoleAccess(r *http.Request, c *call) (answer, error) {
	flag, err := s.flagFromPath(r, c)
	if err != nil {
		return answer{}, err
	}
	f, err := decodeObject(r)
	if err != nil {
		return answer{}, err
	}
	var roleID *string
	if err := f.str("role_id", &roleID); err != nil {
		return answer{}, err
	}
	if roleID == nil {
		return answer{}, controlplane.FieldError("role_id", "required", "This field is required.")
	}
	a, err := s.cfg.Roles.CreateRoleAccess(r.Context(), c.project.ID, flag.ID, *roleID)
	if err != nil {
		return answer{}, err
	}
	return s.answerRoleAccess(r, c, flag, a, http.StatusCreated)
}

func (s *Server) roleAccessID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue("access_id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, controlplane.ErrNotFound
	}
	return id, nil
}

func (s *Server) handleGetRoleAccess(r *http.Request, c *call) (answer, error) {
	flag, err := s.flagFromPath(r, c)
	if err != nil {
		return answer{}, err
	}
	id, err := s.roleAccessID(r)
	if err != nil {
		return answer{}, err
	}
	a, err := s.cfg.Roles.FindRoleAccessByID(r.Context(), c.project.ID, flag.ID, id)
	if err != nil {
		return answer{}, err
	}
	return s.answerRoleAccess(r, c, flag, a, http.StatusOK)
}

func (s *Server) handleDeleteRoleAccess(r *http.Request, c *call) (answer, error) {
	flagID, err := flagIDFromPath(r)
	if err != nil {
		return answer{}, err
	}
	id, err := s.roleAccessID(r)
	if err != nil {
		return answer{}, err
	}
	if err := s.cfg.Roles.DeleteRoleAccess(r.Context(), c.project.ID, flagID, id); err != nil {
		return answer{}, err
	}
	return noContent(), nil
}

package httpapi

import (
	"net/http"

	"github.com/flagedge/flagedge/controlplane"
)

// teamJSON is a project as the user endpoint nests it.
type teamJSON struct {
	ID       int64  `json:"id"`
	UUID     string `json:"uuid"`
	Name     string `json:"name"`
	APIToken string `json:"api_token"`
}

// organizationJSON is the caller's organisation as the user endpoint nests it.
type organizationJSON struct {
	ID              string     `json:"id"`
	Name            string     `json:"name"`
	CreatedAt       timeJSON   `json:"created_at"`
	MembershipLevel int        `json:"membership_level"`
	Teams           []teamJSON `json:"teams"`
	Projects        []teamJSON `json:"projects"`
}

// meJSON is GET /api/users/@me/: the key's user, organisation and projects.
type meJSON struct {
	userJSON
	Organization  organizationJSON `json:"organization"`
	Organizations []struct {
		ID   string `json:"id"`
		Name string `json:"name"`
	} `json:"organizations"`
	Team *teamJSON `json:"team"`
}

// handleMe answers the calling key's user with its organisation and the projects the key
// reaches (only "@me" is addressable: users see no one else through this endpoint).
func (s *Server) handleMe(r *http.Request, key *controlplane.APIKey) (answer, error) {
	if r.PathValue("user") != "@me" {
		return answer{}, controlplane.ErrNotFound
	}
	org, err := s.cfg.Users.FindOrganization(r.Context(), key.User.OrganizationID)
	if err != nil {
		return answer{}, err
	}
	projects, _, err := s.cfg.Projects.FindProjects(r.Context(), controlplane.ProjectFilter{
		OrganizationID: key.User.OrganizationID, IDs: key.Projects, Limit: maxLimit,
	})
	if err != nil {
		return answer{}, err
	}
	out := meJSON{userJSON: *newUserJSON(&key.User), Organization: organizationJSON{
		ID: org.UUID, Name: org.Name, CreatedAt: timeJSON(org.CreatedAt),
		MembershipLevel: controlplane.MembershipLevel(key.User.OrgRole), Teams: []teamJSON{},
	}}
	for _, p := range projects {
		out.Organization.Teams = append(out.Organization.Teams, teamJSON{ID: p.ID, UUID: p.UUID, Name: p.Name, APIToken: p.APIToken})
	}
	out.Organization.Projects = out.Organization.Teams
	if len(out.Organization.Teams) > 0 {
		out.Team = &out.Organization.Teams[0]
	}
	out.Organizations = append(out.Organizations, struct {
		ID   string `json:"id"`
		Name string `json:"name"`
	}{org.UUID, org.Name})
	return ok(out), nil
}

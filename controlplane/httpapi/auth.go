package httpapi

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"github.com/flagedge/flagedge/controlplane"
)

var errCurrentAmbiguous = controlplane.FieldError("project_id", "invalid_input",
	"@current is ambiguous: this key reaches several projects; use a project id.")

// call is an authenticated request addressed to one project.
type call struct {
	key     *controlplane.APIKey
	project *controlplane.Project
}

// keyHandler answers a request made with a personal key, as the key's user.
type keyHandler func(r *http.Request, key *controlplane.APIKey) (answer, error)

// projectHandler answers a request addressed to a project the key reaches.
type projectHandler func(r *http.Request, c *call) (answer, error)

// withKey authenticates the personal key and checks its scope before calling h as the key's
// user.
func (s *Server) withKey(scope controlplane.Scope, h keyHandler) handler {
	return func(r *http.Request) (answer, error) {
		key, err := s.authenticate(r, scope)
		if err != nil {
			return answer{}, err
		}
		return h(asUser(r, key), key)
	}
}

// withProject authenticates, checks the scope and resolves the path's project_id to a
// project the key reaches before calling h.
func (s *Server) withProject(scope controlplane.Scope, h projectHandler) handler {
	return func(r *http.Request) (answer, error) {
		key, err := s.authenticate(r, scope)
		if err != nil {
			return answer{}, err
		}
		r = asUser(r, key)
		project, err := s.resolveProject(r.Context(), key, r.PathValue("project_id"))
		if err != nil {
			return answer{}, err
		}
		return h(r, &call{key: key, project: project})
	}
}

// asUser returns r acting as the key's user: the services decide what the user may do.
func asUser(r *http.Request, key *controlplane.APIKey) *http.Request {
	return r.WithContext(controlplane.NewContextWithUser(r.Context(), &key.User))
}

// authenticate returns the bearer key of the request, when it carries the scope.
func (s *Server) authenticate(r *http.Request, scope controlplane.Scope) (*controlplane.APIKey, error) {
	header := r.Header.Get("Authorization")
	if header == "" {
		return nil, controlplane.ErrNotAuthenticated
	}
	scheme, secret, _ := strings.Cut(header, " ")
	if !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(secret) == "" {
		return nil, controlplane.ErrNotAuthenticated
	}
	key, err := s.cfg.Auth.AuthenticatePersonalKey(r.Context(), strings.TrimSpace(secret))
	if err != nil {
		return nil, err
	}
	if !key.HasScope(scope) {
		return nil, controlplane.Errorf(controlplane.Forbidden, "permission_denied", "API key missing required scope '%s'", scope)
	}
	return key, nil
}

// resolveProject maps a path's project_id ("@current" or a number) to a project the key
// reaches. A project the key does not reach, existing or not, is a 403: the services refuse
// another organisation's, the key's own limit to some projects is checked here.
func (s *Server) resolveProject(ctx context.Context, key *controlplane.APIKey, raw string) (*controlplane.Project, error) {
	if raw == "@current" {
		return s.currentProject(ctx, key)
	}
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id <= 0 {
		return nil, controlplane.ErrNotFound
	}
	p, err := s.cfg.Projects.FindProjectByID(ctx, id)
	if err == nil && !key.Reaches(p) {
		return nil, controlplane.ErrPermissionDenied
	}
	return p, err
}

// currentProject is the one project the key is limited to, or the one project of its
// organisation.
func (s *Server) currentProject(ctx context.Context, key *controlplane.APIKey) (*controlplane.Project, error) {
	list, _, err := s.cfg.Projects.FindProjects(ctx, controlplane.ProjectFilter{
		OrganizationID: key.User.OrganizationID, IDs: key.Projects, Limit: 2,
	})
	if err != nil {
		return nil, err
	}
	switch len(list) {
	case 0:
		return nil, controlplane.ErrNotFound
	case 1:
		return list[0], nil
	}
	return nil, errCurrentAmbiguous
}

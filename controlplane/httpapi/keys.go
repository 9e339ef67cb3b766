package httpapi

import (
	"net/http"
	"strconv"

	"github.com/flagedge/flagedge/controlplane"
)

// keyJSON is a personal API key in PostHog's shape; Value (the secret) only in the answer
// to its creation.
type keyJSON struct {
	ID                  int64     `json:"id"`
	Label               string    `json:"label"`
	Value               *string   `json:"value,omitempty"`
	MaskValue           string    `json:"mask_value"`
	CreatedAt           timeJSON  `json:"created_at"`
	LastUsedAt          *timeJSON `json:"last_used_at"`
	UserID              int64     `json:"user_id"`
	Scopes              []string  `json:"scopes"`
	ScopedTeams         []int64   `json:"scoped_teams"`
	ScopedOrganizations []string  `json:"scoped_organizations"`
}

func newKeyJSON(k *controlplane.PersonalKey) keyJSON {
	out := keyJSON{ID: k.ID, Label: k.Label, MaskValue: k.MaskValue, CreatedAt: timeJSON(k.CreatedAt), UserID: k.UserID,
		Scopes: nonNil(k.Scopes), ScopedTeams: nonNil(k.ScopedTeams), ScopedOrganizations: nonNil(k.ScopedOrganizations)}
	out.LastUsedAt = optTime(k.LastUsedAt)
	return out
}

// handleListKeys answers the caller's keys, newest first, as a plain list (as PostHog does).
func (s *Server) handleListKeys(r *http.Request, key *controlplane.APIKey) (answer, error) {
	list, err := s.cfg.Keys.FindKeys(r.Context())
	if err != nil {
		return answer{}, err
	}
	out := make([]keyJSON, len(list))
	for i, k := range list {
		out[i] = newKeyJSON(k)
	}
	return ok(out), nil
}

func decodeKeyUpdate(r *http.Request) (controlplane.KeyUpdate, error) {
	var u controlplane.KeyUpdate
	f, err := decodeObject(r)
	if err != nil {
		return u, err
	}
	for _, step := range []error{
		f.str("label", &u.Label),
		f.strings("scopes", &u.Scopes),
		f.ints("scoped_teams", &u.ScopedTeams),
		f.strings("scoped_organizations", &u.ScopedOrganizations),
	} {
		if step != nil {
			return u, step
		}
	}
	return u, nil
}

func (s *Server) handleCreateKey(r *http.Request, key *controlplane.APIKey) (answer, error) {
	upd, err := decodeKeyUpdate(r)
	if err != nil {
		return answer{}, err
	}
	if err := upd.Validate(true, key); err != nil {
		return answer{}, err
	}
	k, secret, err := s.cfg.Keys.CreateKey(r.Context(), upd)
	if err != nil {
		return answer{}, err
	}
	out := newKeyJSON(k)
	out.Value = &secret
	return created(out), nil
}

// keyFromPath loads the path's key among the caller's; "@current" is the calling key.
func (s *Server) keyFromPath(r *http.Request, key *controlplane.APIKey) (*controlplane.PersonalKey, error) {
	raw := r.PathValue("id")
	if raw == "@current" {
		if key.ID == 0 {
			return nil, controlplane.ErrNotFound // a console session is no key
		}
		return s.cfg.Keys.FindKeyByID(r.Context(), key.ID)
	}
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id <= 0 {
		return nil, controlplane.ErrNotFound
	}
	return s.cfg.Keys.FindKeyByID(r.Context(), id)
}

func (s *Server) handleGetKey(r *http.Request, key *controlplane.APIKey) (answer, error) {
	k, err := s.keyFromPath(r, key)
	if err != nil {
		return answer{}, err
	}
	return ok(newKeyJSON(k)), nil
}

func (s *Server) handlePatchKey(r *http.Request, key *controlplane.APIKey) (answer, error) {
	k, err := s.keyFromPath(r, key)
	if err != nil {
		return answer{}, err
	}
	upd, err := decodeKeyUpdate(r)
	if err != nil {
		return answer{}, err
	}
	if err := upd.Validate(false, key); err != nil {
		return answer{}, err
	}
	k, err = s.cfg.Keys.UpdateKey(r.Context(), k.ID, upd)
	if err != nil {
		return answer{}, err
	}
	return ok(newKeyJSON(k)), nil
}

// handleDeleteKey revokes a key: the API refuses it at once, edges with their next snapshot.
func (s *Server) handleDeleteKey(r *http.Request, key *controlplane.APIKey) (answer, error) {
	k, err := s.keyFromPath(r, key)
	if err != nil {
		return answer{}, err
	}
	if err := s.cfg.Keys.DeleteKey(r.Context(), k.ID); err != nil {
		return answer{}, err
	}
	return noContent(), nil
}

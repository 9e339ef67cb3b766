package console

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/flagedge/flagedge/controlplane"
)

// keysPage lists the user's personal API keys; NewKey is shown once, right after creation.
type keysPage struct {
	Keys      []keyView
	NewKey    *keyView
	Objects   []string
	Error     string
	ErrorAttr string
	Label     string
}

func (c *Console) keysPage(q *request, status int, data *keysPage) error {
	p, err := q.page("Personal API keys", "keys")
	if err != nil {
		return err
	}
	if err := q.api("GET", "/api/personal_api_keys/", nil, &data.Keys); err != nil {
		return err
	}
	data.Objects = controlplane.ScopeObjects
	p.Data = data
	c.render(q.w, status, "keys", p)
	return nil
}

func (c *Console) handleKeys(q *request) error { return c.keysPage(q, http.StatusOK, &keysPage{}) }

// handleCreateKey issues a key with the chosen scopes and shows its value once (the page is
// the POST's answer, never stored, and marked no-store).
func (c *Console) handleCreateKey(q *request) error {
	data := &keysPage{Label: strings.TrimSpace(q.r.PostFormValue("label"))}
	var scopes []string
	if q.r.PostFormValue("all") == "on" {
		scopes = []string{"*"}
	} else {
		for _, obj := range controlplane.ScopeObjects {
			switch lvl := q.r.PostFormValue("scope_" + obj); lvl {
			case "read", "write":
				scopes = append(scopes, obj+":"+lvl)
			}
		}
	}
	body := map[string]any{"label": data.Label, "scopes": scopes}
	if scopes == nil {
		body["scopes"] = []string{}
	}
	if pid := q.r.PostFormValue("project"); pid != "" {
		if id, err := strconv.ParseInt(pid, 10, 64); err == nil {
			body["scoped_teams"] = []int64{id}
		}
	}
	var created keyView
	if err := q.api("POST", "/api/personal_api_keys/", body, &created); err != nil {
		ae := asAPIError(err)
		if ae == nil || ae.Status != http.StatusBadRequest {
			return err
		}
		data.Error, data.ErrorAttr = ae.Detail, ae.field()
		return c.keysPage(q, http.StatusBadRequest, data)
	}
	data.NewKey, data.Label = &created, ""
	return c.keysPage(q, http.StatusCreated, data)
}

func (c *Console) handleDeleteKey(q *request) error {
	id, err := strconv.ParseInt(q.r.PathValue("id"), 10, 64)
	if err != nil {
		return &apiError{Status: http.StatusNotFound, Detail: "Not found."}
	}
	if err := q.api("DELETE", "/api/personal_api_keys/"+strconv.FormatInt(id, 10)+"/", nil, nil); err != nil {
		return err
	}
	return q.redirect("/settings/keys", "success", "Key revoked. Edges stop accepting it within a second.")
}

// membersPage lists the organisation's members; Invite holds a new member's link, once.
type membersPage struct {
	Members []memberView
	Invite  *struct {
		TargetEmail    string `json:"target_email"`
		SetPasswordURL string `json:"set_password_url"`
	}
	Error string
}

func (c *Console) membersPage(q *request, status int, data *membersPage) error {
	p, err := q.page("Members", "members")
	if err != nil {
		return err
	}
	var list listOf[memberView]
	if err := q.api("GET", "/api/organizations/@current/members/?limit=1000", nil, &list); err != nil {
		return err
	}
	data.Members = list.Results
	p.Data = data
	c.render(q.w, status, "members", p)
	return nil
}

func (c *Console) handleMembers(q *request) error {
	return c.membersPage(q, http.StatusOK, &membersPage{})
}

func (c *Console) handleInvite(q *request) error {
	data := &membersPage{}
	level := 1
	if q.r.PostFormValue("admin") == "on" {
		level = 8
	}
	err := q.api("POST", "/api/organizations/@current/invites/", map[string]any{
		"target_email": q.r.PostFormValue("email"), "first_name": q.r.PostFormValue("first_name"), "level": level}, &data.Invite)
	if err != nil {
		ae := asAPIError(err)
		if ae == nil || ae.Status >= 500 {
			return err
		}
		data.Invite, data.Error = nil, ae.Detail
		return c.membersPage(q, ae.Status, data)
	}
	return c.membersPage(q, http.StatusCreated, data)
}

func (c *Console) handleRemoveMember(q *request) error {
	if err := q.api("DELETE", "/api/organizations/@current/members/"+q.r.PathValue("uuid")+"/", nil, nil); err != nil {
		ae := asAPIError(err)
		if ae == nil || ae.Status >= 500 {
			return err
		}
		return q.redirect("/settings/members", "error", ae.Detail)
	}
	return q.redirect("/settings/members", "success", "Member removed.")
}

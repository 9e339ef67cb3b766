package console

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/flagedge/flagedge/controlplane"
)

// keysPage lists the user's personal API keys; NewKey is shown once, right after creation.
type keysPage struct {
	Keys      []*controlplane.PersonalKey
	NewKey    *newKeyView
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
	if data.Keys, err = q.c.cfg.Keys.FindKeys(q.ctx); err != nil {
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
	if scopes == nil {
		scopes = []string{}
	}
	upd := controlplane.KeyUpdate{Label: &data.Label, Scopes: &scopes}
	if pid := q.r.PostFormValue("project"); pid != "" {
		if id, err := strconv.ParseInt(pid, 10, 64); err == nil {
			upd.ScopedTeams = &[]int64{id}
		}
	}
	created, secret, err := q.c.cfg.Keys.CreateKey(q.ctx, upd)
	if err != nil {
		e := invalid(err)
		if e == nil {
			return err
		}
		data.Error, data.ErrorAttr = e.Detail, e.Attr
		return c.keysPage(q, http.StatusBadRequest, data)
	}
	data.NewKey, data.Label = &newKeyView{PersonalKey: created, Value: secret}, ""
	return c.keysPage(q, http.StatusCreated, data)
}

func (c *Console) handleDeleteKey(q *request) error {
	id, err := pathID(q.r, "id")
	if err != nil {
		return err
	}
	if err := q.c.cfg.Keys.DeleteKey(q.ctx, id); err != nil {
		return err
	}
	return q.redirect("/settings/keys", "success", "Key revoked. Edges stop accepting it within a second.")
}

// membersPage lists the organisation's members; Invite holds a new member's link, once.
type membersPage struct {
	Members []memberView
	Invite  *inviteView
	Error   string
}

// inviteView is a new member's email and the link that lets them choose a password.
type inviteView struct {
	TargetEmail    string
	SetPasswordURL string
}

func (c *Console) membersPage(q *request, status int, data *membersPage) error {
	p, err := q.page("Members", "members")
	if err != nil {
		return err
	}
	list, _, err := q.c.cfg.Users.FindMembers(q.ctx, q.user().OrganizationID, maxListed, 0)
	if err != nil {
		return err
	}
	for _, m := range list {
		data.Members = append(data.Members, memberView{Member: m, Level: controlplane.MembershipLevel(m.User.OrgRole)})
	}
	p.Data = data
	c.render(q.w, status, "members", p)
	return nil
}

func (c *Console) handleMembers(q *request) error {
	return c.membersPage(q, http.StatusOK, &membersPage{})
}

func (c *Console) handleInvite(q *request) error {
	data := &membersPage{}
	req := controlplane.InviteRequest{Email: q.r.PostFormValue("email"), FirstName: q.r.PostFormValue("first_name"), OrgRole: controlplane.OrgRoleMember}
	if q.r.PostFormValue("admin") == "on" {
		req.OrgRole = controlplane.OrgRoleAdmin
	}
	inv, err := q.c.cfg.Users.InviteMember(q.ctx, req)
	if err != nil {
		e := userError(err)
		if e == nil {
			return err
		}
		data.Error = e.Detail
		return c.membersPage(q, statusOf(e.Kind), data)
	}
	data.Invite = &inviteView{TargetEmail: inv.User.Email, SetPasswordURL: c.baseURL(q.r) + "/set-password?token=" + url.QueryEscape(inv.PasswordToken)}
	return c.membersPage(q, http.StatusCreated, data)
}

func (c *Console) handleRemoveMember(q *request) error {
	if err := q.c.cfg.Users.RemoveOrganizationMember(q.ctx, q.r.PathValue("uuid")); err != nil {
		e := userError(err)
		if e == nil {
			return err
		}
		return q.redirect("/settings/members", "error", e.Detail)
	}
	return q.redirect("/settings/members", "success", "Member removed.")
}

// baseURL is the scheme and host of absolute links: the public URL, else the request's.
func (c *Console) baseURL(r *http.Request) string {
	if base := strings.TrimRight(c.cfg.PublicURL, "/"); base != "" {
		return base
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

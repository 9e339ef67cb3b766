package console

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/flagedge/flagedge/controlplane"
)

// policiesPage lists a project's approval policies, with the form that creates one for the
// organisation's admins (the service refuses others' writes; they see the list only).
type policiesPage struct {
	Policies []*controlplane.ApprovalPolicy
	Actions  []string
	Members  []*controlplane.Member
	Roles    []*controlplane.Role
	// Names are the approvers' names by user id and by role id, for the list.
	UserNames map[int64]string
	RoleNames map[string]string
	CanAdmin  bool
	Form      policyForm
	Error     string
	ErrorAttr string
}

// policyForm is the create form as posted, shown again with its error.
type policyForm struct {
	Action           string
	Users            map[int64]bool
	Roles            map[string]bool
	Quorum           string
	AllowSelfApprove bool
	// AllowApprovedPlans is the policy's allow_approved_release_plans.
	AllowApprovedPlans bool
	ExpiryDays         string
}

func (c *Console) policiesPage(q *request, status int, data *policiesPage) error {
	p, err := q.page("Approval policies", "policies")
	if err != nil {
		return err
	}
	list, _, err := c.cfg.Approvals.FindApprovalPolicies(q.ctx, controlplane.ApprovalPolicyFilter{ProjectID: p.Project.ID, Limit: maxListed})
	if err != nil {
		return err
	}
	members, _, err := c.cfg.Users.FindMembers(q.ctx, q.user().OrganizationID, maxListed, 0)
	if err != nil {
		return err
	}
	roles, _, err := c.cfg.Roles.FindRoles(q.ctx, q.user().OrganizationID, maxListed, 0)
	if err != nil {
		return err
	}
	data.Policies, data.Actions, data.Members, data.Roles = list, controlplane.ApprovalActions, members, roles
	data.CanAdmin = controlplane.CanAdminOrg(q.user(), q.user().OrganizationID)
	data.UserNames, data.RoleNames = map[int64]string{}, map[string]string{}
	for _, m := range members {
		data.UserNames[m.User.ID] = m.User.Email
	}
	for _, r := range roles {
		data.RoleNames[r.ID] = r.Name
	}
	p.Data = data
	c.render(q.w, status, "policies", p)
	return nil
}

// handlePolicies lists the project's approval policies.
func (c *Console) handlePolicies(q *request) error {
	return c.policiesPage(q, http.StatusOK, &policiesPage{Form: policyForm{Quorum: "1", ExpiryDays: "14"}})
}

// handleCreatePolicy creates a policy from the form: the action, the approvers (users and
// roles) and their quorum, whether requesters may approve their own changes, and the days a
// request waits before it expires. A refused form is shown again with the service's error.
func (c *Console) handleCreatePolicy(q *request) error {
	project, err := q.project()
	if err != nil {
		return err
	}
	f := policyForm{Action: q.r.PostFormValue("action_key"), Users: map[int64]bool{}, Roles: map[string]bool{},
		Quorum: strings.TrimSpace(q.r.PostFormValue("quorum")), AllowSelfApprove: q.r.PostFormValue("allow_self_approve") == "on",
		AllowApprovedPlans: q.r.PostFormValue("allow_approved_release_plans") == "on",
		ExpiryDays:         strings.TrimSpace(q.r.PostFormValue("expiry_days"))}
	cfg := controlplane.ApproverConfig{Users: []int64{}, Roles: []string{}}
	for _, v := range q.r.PostForm["users"] {
		if id, err := strconv.ParseInt(v, 10, 64); err == nil {
			cfg.Users = append(cfg.Users, id)
			f.Users[id] = true
		}
	}
	for _, v := range q.r.PostForm["roles"] {
		cfg.Roles = append(cfg.Roles, v)
		f.Roles[v] = true
	}
	data := &policiesPage{Form: f}
	fail := func(attr, detail string) error {
		data.Error, data.ErrorAttr = detail, attr
		return c.policiesPage(q, http.StatusBadRequest, data)
	}
	if cfg.Quorum, err = strconv.Atoi(f.Quorum); err != nil {
		return fail("approver_config", "The quorum is a whole number.")
	}
	days, err := strconv.Atoi(f.ExpiryDays)
	if err != nil {
		return fail("expires_after", "The expiry is a whole number of days.")
	}
	expiry := time.Duration(days) * 24 * time.Hour
	_, err = c.cfg.Approvals.CreateApprovalPolicy(q.ctx, project.ID, controlplane.ApprovalPolicyUpdate{ActionKey: &f.Action,
		ApproverConfig: &cfg, AllowSelfApprove: &f.AllowSelfApprove, ExpiresAfter: &expiry, AllowApprovedReleasePlans: &f.AllowApprovedPlans})
	if err != nil {
		e := invalid(err)
		if e == nil {
			return err
		}
		return fail(e.Attr, e.Detail)
	}
	return q.redirect(q.projectPath("/approval_policies"), "success", "Approval policy for "+f.Action+" created.")
}

// handleSetPolicyEnabled enables or disables the path's policy (the form's enabled).
func (c *Console) handleSetPolicyEnabled(q *request) error {
	project, err := q.project()
	if err != nil {
		return err
	}
	id := q.r.PathValue("aid")
	if !controlplane.ValidUUID(id) {
		return controlplane.ErrNotFound
	}
	on := q.r.PostFormValue("enabled") == "true"
	if _, err := c.cfg.Approvals.UpdateApprovalPolicy(q.ctx, project.ID, id, controlplane.ApprovalPolicyUpdate{Enabled: &on}); err != nil {
		return err
	}
	msg := "Approval policy disabled."
	if on {
		msg = "Approval policy enabled."
	}
	return q.redirect(q.projectPath("/approval_policies"), "success", msg)
}

// handleDeletePolicy deletes the path's policy; the requests it gated keep their snapshot.
func (c *Console) handleDeletePolicy(q *request) error {
	project, err := q.project()
	if err != nil {
		return err
	}
	id := q.r.PathValue("aid")
	if !controlplane.ValidUUID(id) {
		return controlplane.ErrNotFound
	}
	if err := c.cfg.Approvals.DeleteApprovalPolicy(q.ctx, project.ID, id); err != nil {
		return err
	}
	return q.redirect(q.projectPath("/approval_policies"), "success", "Approval policy deleted.")
}

package console

import (
	"errors"
	"net/http"
	"strings"

	"github.com/flagedge/flagedge/controlplane"
)

// heldForReview reports whether err is a gated write of a flag (the services'
// ApprovalRequiredError) and, if so, answers it with a redirect to the change request that
// now holds the write, saying it was sent for review.
func (q *request) heldForReview(err error) bool {
	var gated *controlplane.ApprovalRequiredError
	if !errors.As(err, &gated) {
		return false
	}
	msg := "Sent for review: the change applies once it is approved."
	if gated.Code == "change_request_pending" {
		msg = "The same change is already waiting for review."
	}
	_ = q.redirect(q.projectPath("/change_requests/%s", gated.ChangeRequest.ID), "success", msg) // always nil
	return true
}

// changeRequestsPage lists a project's change requests, pending ones first.
type changeRequestsPage struct {
	Requests []*controlplane.ChangeRequest
	Total    int
}

// handleChangeRequests lists the project's change requests: those waiting for review first,
// then the others, newest first within each.
func (c *Console) handleChangeRequests(q *request) error {
	p, err := q.page("Change requests", "changes")
	if err != nil {
		return err
	}
	data := &changeRequestsPage{}
	// Two reads, so that pending requests come first however many others there are.
	others := []string{controlplane.StateApproved, controlplane.StateApplied, controlplane.StateRejected, controlplane.StateExpired,
		controlplane.StateFailed}
	for _, states := range [][]string{{controlplane.StatePending}, others} {
		list, total, err := c.cfg.Approvals.FindChangeRequests(q.ctx, controlplane.ChangeRequestFilter{ProjectID: p.Project.ID,
			States: states, Limit: maxListed})
		if err != nil {
			return err
		}
		data.Requests, data.Total = append(data.Requests, list...), data.Total+total
	}
	p.Data = data
	c.render(q.w, http.StatusOK, "changerequests", p)
	return nil
}

// changeRequestPage is one change request under review.
type changeRequestPage struct {
	Request *controlplane.ChangeRequest
	// FlagID is the flag the request changes (0 for a flag it creates).
	FlagID  int64
	Changes []changeView
	Error   string
}

// loadChangeRequest reads the path's change request of the path's project.
func (q *request) loadChangeRequest() (*controlplane.ChangeRequest, error) {
	pid, err := pathID(q.r, "pid")
	if err != nil {
		return nil, err
	}
	id := q.r.PathValue("cid")
	if !controlplane.ValidUUID(id) {
		return nil, controlplane.ErrNotFound
	}
	return q.c.cfg.Approvals.FindChangeRequestByID(q.ctx, pid, id)
}

// handleChangeRequest shows a change request for review: what it changes (the gated fields
// before and after and, while it waits, the flag's stored filters against the requested
// ones), its votes and state, the vote and cancel forms the user may use, and once applied
// how many edges serve it (loaded after the page, as the rollout line of a save).
func (c *Console) handleChangeRequest(q *request) error {
	return c.changeRequestPage(q, http.StatusOK, "")
}

func (c *Console) changeRequestPage(q *request, status int, formError string) error {
	cr, err := q.loadChangeRequest()
	if err != nil {
		return err
	}
	p, err := q.page("Change request", "changes")
	if err != nil {
		return err
	}
	data := &changeRequestPage{Request: cr, Error: formError}
	if cr.Intent.FlagID != nil {
		data.FlagID = *cr.Intent.FlagID
	}
	d := cr.IntentDisplay
	data.Changes = append(data.Changes, describeChange("gated fields", "changed", jsonOf(d.Before), jsonOf(d.After)))
	if filters := cr.Intent.FullRequestData.Filters; filters != nil && cr.State == controlplane.StatePending {
		var before []byte // a flag to create, or one deleted since: every line is new
		if data.FlagID != 0 {
			f, err := c.cfg.Flags.FindFlagByID(q.ctx, cr.ProjectID, data.FlagID)
			switch {
			case err == nil:
				before = f.Filters
			case controlplane.ErrorKind(err) != controlplane.NotFound:
				return err
			}
		}
		data.Changes = append(data.Changes, describeChange("filters", "changed", before, filters))
	}
	p.Data = data
	c.render(q.w, status, "changerequest", p)
	return nil
}

// handleVote approves or rejects the path's change request with the form's reason; a
// rejection without one is shown beside the form.
func (c *Console) handleVote(approve bool) sessionHandler {
	return func(q *request) error {
		cr, err := q.loadChangeRequest()
		if err != nil {
			return err
		}
		reason := strings.TrimSpace(q.r.PostFormValue("reason"))
		var d *controlplane.Decision
		if approve {
			d, err = c.cfg.Approvals.ApproveChangeRequest(q.ctx, cr.ProjectID, cr.ID, reason)
		} else {
			d, err = c.cfg.Approvals.RejectChangeRequest(q.ctx, cr.ProjectID, cr.ID, reason)
		}
		if err != nil {
			if e := invalid(err); e != nil {
				return c.changeRequestPage(q, http.StatusBadRequest, e.Detail)
			}
			return err
		}
		return q.redirect(q.projectPath("/change_requests/%s", cr.ID), decisionKind(d), d.Message)
	}
}

// decisionKind is the flash kind of a decision's message: a failed application is an error.
func decisionKind(d *controlplane.Decision) string {
	if d.Status == controlplane.StateFailed {
		return "error"
	}
	return "success"
}

// handleCancelChangeRequest withdraws the user's own change request.
func (c *Console) handleCancelChangeRequest(q *request) error {
	cr, err := q.loadChangeRequest()
	if err != nil {
		return err
	}
	d, err := c.cfg.Approvals.CancelChangeRequest(q.ctx, cr.ProjectID, cr.ID, strings.TrimSpace(q.r.PostFormValue("reason")))
	if err != nil {
		return err
	}
	return q.redirect(q.projectPath("/change_requests/%s", cr.ID), "success", d.Message)
}

package console

import (
	"net/http"
	"strings"

	"github.com/flagedge/flagedge/controlplane"
)

// webhooksPage lists a project's webhooks with the form that creates one.
type webhooksPage struct {
	Hooks     []*controlplane.Webhook
	Kinds     []string
	URL       string
	Events    map[string]bool // the kinds ticked in the form
	Error     string
	ErrorAttr string
}

func (c *Console) webhooksPage(q *request, status int, data *webhooksPage) error {
	p, err := q.page("Webhooks", "webhooks")
	if err != nil {
		return err
	}
	list, _, err := q.c.cfg.Webhooks.FindWebhooks(q.ctx, p.Project.ID, maxListed, 0)
	if err != nil {
		return err
	}
	data.Hooks, data.Kinds = list, controlplane.WebhookEventKinds
	p.Data = data
	c.render(q.w, status, "webhooks", p)
	return nil
}

// handleWebhooks lists the project's webhooks (organisation admins only: the service refuses
// others).
func (c *Console) handleWebhooks(q *request) error {
	return c.webhooksPage(q, http.StatusOK, &webhooksPage{Events: map[string]bool{}})
}

// handleCreateWebhook creates a hook from the form; a refused URL or kind is shown beside it.
func (c *Console) handleCreateWebhook(q *request) error {
	project, err := q.project()
	if err != nil {
		return err
	}
	data := &webhooksPage{URL: strings.TrimSpace(q.r.PostFormValue("url")), Events: map[string]bool{}}
	events := []string{}
	for _, k := range q.r.PostForm["events"] {
		events = append(events, k)
		data.Events[k] = true
	}
	secret := q.r.PostFormValue("secret")
	_, err = q.c.cfg.Webhooks.CreateWebhook(q.ctx, project.ID, controlplane.WebhookUpdate{URL: &data.URL, Events: events, Secret: &secret})
	if err != nil {
		e := invalid(err)
		if e == nil {
			return err
		}
		data.Error, data.ErrorAttr = e.Detail, e.Attr
		return c.webhooksPage(q, http.StatusBadRequest, data)
	}
	return q.redirect(q.projectPath("/webhooks"), "success", "Webhook created.")
}

// loadWebhook reads the path's webhook of the path's project.
func (q *request) loadWebhook() (*controlplane.Webhook, error) {
	pid, id, err := q.objectIDs()
	if err != nil {
		return nil, err
	}
	return q.c.cfg.Webhooks.FindWebhookByID(q.ctx, pid, id)
}

// handleDeleteWebhook deletes a webhook, which the deletion itself checks: a hook the user
// may not change is refused, a missing one not found.
func (c *Console) handleDeleteWebhook(q *request) error {
	pid, id, err := q.objectIDs()
	if err != nil {
		return err
	}
	if err := q.c.cfg.Webhooks.DeleteWebhook(q.ctx, pid, id); err != nil {
		return err
	}
	return q.redirect(q.projectPath("/webhooks"), "success", "Webhook deleted with its delivery log.")
}

// webhookPage is one hook and its latest deliveries.
type webhookPage struct {
	Hook       *controlplane.Webhook
	Deliveries []*controlplane.WebhookDelivery
	Total      int
}

// handleWebhook shows a hook's delivery log, newest first.
func (c *Console) handleWebhook(q *request) error {
	h, err := q.loadWebhook()
	if err != nil {
		return err
	}
	p, err := q.page("Webhook", "webhooks")
	if err != nil {
		return err
	}
	list, total, err := q.c.cfg.Webhooks.FindDeliveries(q.ctx, h.ProjectID, h.ID, maxListed, 0)
	if err != nil {
		return err
	}
	p.Data = &webhookPage{Hook: h, Deliveries: list, Total: total}
	c.render(q.w, http.StatusOK, "webhook", p)
	return nil
}

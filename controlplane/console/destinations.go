package console

import (
	"net/http"
	"strings"

	"github.com/flagedge/flagedge/controlplane"
)

// destinationsPage lists where a project's events are forwarded, with the form that adds a
// destination.
type destinationsPage struct {
	Destinations []*controlplane.EventDestination
	URL          string
	Error        string
	ErrorAttr    string
}

func (c *Console) destinationsPage(q *request, status int, data *destinationsPage) error {
	p, err := q.page("Event destinations", "destinations")
	if err != nil {
		return err
	}
	list, _, err := q.c.cfg.EventDestinations.FindEventDestinations(q.ctx, p.Project.ID, maxListed, 0)
	if err != nil {
		return err
	}
	data.Destinations = list
	p.Data = data
	c.render(q.w, status, "destinations", p)
	return nil
}

// handleDestinations lists the project's event destinations (organisation admins only: the
// service refuses others).
func (c *Console) handleDestinations(q *request) error {
	return c.destinationsPage(q, http.StatusOK, &destinationsPage{})
}

// handleCreateDestination adds a destination from the form; a refused URL or key is shown
// beside it.
func (c *Console) handleCreateDestination(q *request) error {
	project, err := q.project()
	if err != nil {
		return err
	}
	data := &destinationsPage{URL: strings.TrimSpace(q.r.PostFormValue("url"))}
	key := strings.TrimSpace(q.r.PostFormValue("api_key"))
	_, err = q.c.cfg.EventDestinations.CreateEventDestination(q.ctx, project.ID, controlplane.EventDestinationUpdate{URL: &data.URL, APIKey: &key})
	if err != nil {
		e := invalid(err)
		if e == nil {
			return err
		}
		data.Error, data.ErrorAttr = e.Detail, e.Attr
		return c.destinationsPage(q, http.StatusBadRequest, data)
	}
	return q.redirect(q.projectPath("/destinations"), "success", "Event destination added: events captured from now on are forwarded to it.")
}

// handleEnableDestination enables or disables a destination (the form's enabled is "true" or
// "false"); enabling also resumes a paused one. The update itself refuses a destination the
// user may not change and tells a missing one.
func (c *Console) handleEnableDestination(q *request) error {
	pid, id, err := q.objectIDs()
	if err != nil {
		return err
	}
	enabled := q.r.PostFormValue("enabled") == "true"
	if _, err := q.c.cfg.EventDestinations.UpdateEventDestination(q.ctx, pid, id, controlplane.EventDestinationUpdate{Enabled: &enabled}); err != nil {
		return err
	}
	msg := "Event destination disabled: events are no longer queued for it."
	if enabled {
		msg = "Event destination enabled."
	}
	return q.redirect(q.projectPath("/destinations"), "success", msg)
}

// handleDeleteDestination deletes a destination, which the deletion itself checks as the
// update does.
func (c *Console) handleDeleteDestination(q *request) error {
	pid, id, err := q.objectIDs()
	if err != nil {
		return err
	}
	if err := q.c.cfg.EventDestinations.DeleteEventDestination(q.ctx, pid, id); err != nil {
		return err
	}
	return q.redirect(q.projectPath("/destinations"), "success", "Event destination deleted with the events still queued for it.")
}

package httpapi

import (
	"net/http"

	"github.com/flagedge/flagedge/controlplane"
)

// webhookJSON is the API's webhook object. The secret is write-only: secret_set says that
// one is stored.
type webhookJSON struct {
	ID        int64     `json:"id"`
	URL       string    `json:"url"`
	Events    []string  `json:"events"`
	Enabled   bool      `json:"enabled"`
	SecretSet bool      `json:"secret_set"`
	CreatedBy *userJSON `json:"created_by"`
	CreatedAt timeJSON  `json:"created_at"`
	UpdatedAt timeJSON  `json:"updated_at"`
}

func newWebhookJSON(h *controlplane.Webhook) webhookJSON {
	return webhookJSON{ID: h.ID, URL: h.URL, Events: nonNil(h.Events), Enabled: h.Enabled, SecretSet: h.Secret != "",
		CreatedBy: newUserJSON(h.CreatedBy), CreatedAt: timeJSON(h.CreatedAt), UpdatedAt: timeJSON(h.UpdatedAt)}
}

// deliveryJSON is one entry of a hook's delivery log.
type deliveryJSON struct {
	ID             string    `json:"id"`
	EventID        string    `json:"event_id"`
	Event          string    `json:"event"`
	Status         string    `json:"status"`
	Attempts       int       `json:"attempts"`
	LastStatusCode *int      `json:"last_status_code"`
	LastError      string    `json:"last_error"`
	ResponsePrefix string    `json:"response_prefix"`
	NextAttemptAt  *timeJSON `json:"next_attempt_at"`
	CreatedAt      timeJSON  `json:"created_at"`
	UpdatedAt      timeJSON  `json:"updated_at"`
	DeliveredAt    *timeJSON `json:"delivered_at"`
}

func newDeliveryJSON(d *controlplane.WebhookDelivery) deliveryJSON {
	out := deliveryJSON{ID: d.ID, EventID: d.EventID, Event: d.Kind, Status: d.Status, Attempts: d.Attempts,
		LastStatusCode: d.LastStatusCode, LastError: d.LastError, ResponsePrefix: d.ResponsePrefix,
		CreatedAt: timeJSON(d.CreatedAt), UpdatedAt: timeJSON(d.UpdatedAt)}
	out.NextAttemptAt = optTime(d.NextAttemptAt)
	out.DeliveredAt = optTime(d.DeliveredAt)
	return out
}

// WebhookObjects renders what webhook deliveries carry as this API shows it, for the
// dispatcher (controlplane/webhook): a flag as GET .../feature_flags/{id}/ answers it (with
// can_edit false and no evaluation counts: a delivery has no viewer), an annotation, a
// scheduled change, a user summary.
type WebhookObjects struct{}

// Flag renders a flag.
func (WebhookObjects) Flag(f *controlplane.Flag) any { return newFlagJSON(f, false) }

// Annotation renders an annotation.
func (WebhookObjects) Annotation(a *controlplane.Annotation) any { return newAnnotationJSON(a) }

// ScheduledChange renders a scheduled change as the scheduler executed it or gave it up.
func (WebhookObjects) ScheduledChange(c *controlplane.ScheduledChange) any {
	return newScheduledChangeJSON(c)
}

// User renders the actor of an event.
func (WebhookObjects) User(u *controlplane.User) any { return newUserJSON(u) }

func (s *Server) handleListWebhooks(r *http.Request, c *call) (answer, error) {
	limit, offset, err := pageParams(r)
	if err != nil {
		return answer{}, err
	}
	list, total, err := s.cfg.Webhooks.FindWebhooks(r.Context(), c.project.ID, limit, offset)
	if err != nil {
		return answer{}, err
	}
	out := make([]webhookJSON, len(list))
	for i, h := range list {
		out[i] = newWebhookJSON(h)
	}
	return ok(s.newPage(r, total, limit, offset, out)), nil
}

func decodeWebhookUpdate(r *http.Request) (controlplane.WebhookUpdate, error) {
	var u controlplane.WebhookUpdate
	f, err := decodeObject(r)
	if err != nil {
		return u, err
	}
	var events *[]string
	for _, step := range []error{
		f.str("url", &u.URL),
		f.strings("events", &events),
		f.str("secret", &u.Secret),
		f.boolean("enabled", &u.Enabled),
	} {
		if step != nil {
			return u, step
		}
	}
	if events != nil {
		u.Events = append([]string{}, *events...)
	}
	return u, nil
}

func (s *Server) handleCreateWebhook(r *http.Request, c *call) (answer, error) {
	upd, err := decodeWebhookUpdate(r)
	if err != nil {
		return answer{}, err
	}
	h, err := s.cfg.Webhooks.CreateWebhook(r.Context(), c.project.ID, upd)
	if err != nil {
		return answer{}, err
	}
	return created(newWebhookJSON(h)), nil
}

func (s *Server) handleGetWebhook(r *http.Request, c *call) (answer, error) {
	id, err := pathID(r)
	if err != nil {
		return answer{}, err
	}
	h, err := s.cfg.Webhooks.FindWebhookByID(r.Context(), c.project.ID, id)
	if err != nil {
		return answer{}, err
	}
	return ok(newWebhookJSON(h)), nil
}

func (s *Server) handlePatchWebhook(r *http.Request, c *call) (answer, error) {
	id, err := pathID(r)
	if err != nil {
		return answer{}, err
	}
	upd, err := decodeWebhookUpdate(r)
	if err != nil {
		return answer{}, err
	}
	h, err := s.cfg.Webhooks.UpdateWebhook(r.Context(), c.project.ID, id, upd)
	if err != nil {
		return answer{}, err
	}
	return ok(newWebhookJSON(h)), nil
}

func (s *Server) handleDeleteWebhook(r *http.Request, c *call) (answer, error) {
	id, err := pathID(r)
	if err != nil {
		return answer{}, err
	}
	if err := s.cfg.Webhooks.DeleteWebhook(r.Context(), c.project.ID, id); err != nil {
		return answer{}, err
	}
	return noContent(), nil
}

func (s *Server) handleListDeliveries(r *http.Request, c *call) (answer, error) {
	id, err := pathID(r)
	if err != nil {
		return answer{}, err
	}
	limit, offset, err := pageParams(r)
	if err != nil {
		return answer{}, err
	}
	list, total, err := s.cfg.Webhooks.FindDeliveries(r.Context(), c.project.ID, id, limit, offset)
	if err != nil {
		return answer{}, err
	}
	out := make([]deliveryJSON, len(list))
	for i, d := range list {
		out[i] = newDeliveryJSON(d)
	}
	return ok(s.newPage(r, total, limit, offset, out)), nil
}

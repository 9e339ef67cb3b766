package controlplane

import (
	"context"
	"encoding/json"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// The kinds of event a webhook may subscribe to.
const (
	EventFlagCreated             = "feature_flag.created"
	EventFlagUpdated             = "feature_flag.updated"
	EventFlagDeleted             = "feature_flag.deleted"
	EventAnnotationCreated       = "annotation.created"
	EventAnnotationUpdated       = "annotation.updated"
	EventAnnotationDeleted       = "annotation.deleted"
	EventScheduledChangeExecuted = "scheduled_change.executed"
	EventScheduledChangeFailed   = "scheduled_change.failed"
	// The change request events: filed, approved (quorum reached), rejected, applied, and
	// live once every connected edge serves the version it made.
	EventChangeRequestRequested = "change_request.requested"
	EventChangeRequestApproved  = "change_request.approved"
	EventChangeRequestRejected  = "change_request.rejected"
	EventChangeRequestApplied   = "change_request.applied"
	EventChangeRequestLive      = "change_request.live"
)

// WebhookEventKinds are every kind of event, in the order the API documents them.
var WebhookEventKinds = []string{EventFlagCreated, EventFlagUpdated, EventFlagDeleted,
	EventAnnotationCreated, EventAnnotationUpdated, EventAnnotationDeleted,
	EventScheduledChangeExecuted, EventScheduledChangeFailed,
	EventChangeRequestRequested, EventChangeRequestApproved, EventChangeRequestRejected, EventChangeRequestApplied,
	EventChangeRequestLive}

// EventKind names the event of an activity ("created", "updated", "deleted") on an object
// ("feature_flag", "annotation").
func EventKind(object, activity string) string { return object + "." + activity }

// Limits of a webhook's fields, checked before anything is stored.
const (
	MaxWebhookURL    = 2048
	MinWebhookSecret = 16
	MaxWebhookSecret = 256
	// MaxWebhooksPerProject bounds the deliveries one write can enqueue.
	MaxWebhooksPerProject = 50
)

// Delivery states.
const (
	DeliveryPending   = "pending"
	DeliveryDelivered = "delivered"
	DeliveryFailed    = "failed"
)

// Webhook is a project's subscription: the events of the kinds it names are POSTed to URL,
// signed with its secret. The secret is written, never read back through the API.
type Webhook struct {
	ID        int64
	ProjectID int64
	URL       string
	Events    []string
	Secret    string
	Enabled   bool
	CreatedBy *User
	CreatedAt time.Time
	UpdatedAt time.Time
}

// WebhookUpdate holds the writable fields; nil means unchanged.
type WebhookUpdate struct {
	URL     *string
	Events  []string // nil: unchanged
	Secret  *string
	Enabled *bool
}

// Validate checks the update's values: create requires url, events and secret.
func (u *WebhookUpdate) Validate(create bool) error {
	if create {
		switch {
		case u.URL == nil:
			return FieldError("url", "required", "This field is required.")
		case u.Events == nil:
			return FieldError("events", "required", "This field is required.")
		case u.Secret == nil:
			return FieldError("secret", "required", "This field is required.")
		}
	}
	if u.URL != nil {
		if _, err := WebhookTarget(*u.URL); err != nil {
			return err
		}
	}
	if u.Events != nil {
		if len(u.Events) == 0 {
			return FieldError("events", "invalid_input", "Name at least one event kind.")
		}
		for _, k := range u.Events {
			if !slices.Contains(WebhookEventKinds, k) {
				return FieldError("events", "invalid_choice", `"`+cut(k, 64)+`" is not a valid event kind: use `+strings.Join(WebhookEventKinds, ", ")+".")
			}
		}
	}
	if u.Secret != nil {
		if n := utf8.RuneCountInString(*u.Secret); n < MinWebhookSecret || n > MaxWebhookSecret || TextProblem(*u.Secret) != "" {
			return FieldError("secret", "invalid_input", "The secret must be text of 16 to 256 characters.")
		}
	}
	return nil
}

// Apply writes the update onto h; events are kept sorted and unique.
func (u *WebhookUpdate) Apply(h *Webhook) {
	setIf(&h.URL, u.URL)
	setIf(&h.Secret, u.Secret)
	setIf(&h.Enabled, u.Enabled)
	if u.Events != nil {
		h.Events = slices.Compact(slices.Sorted(slices.Values(u.Events)))
	}
}

func cut(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n])
	}
	return s
}

// WebhookTarget parses and checks a webhook URL for its form: http or https, a host, no
// credentials, no fragment, at most MaxWebhookURL bytes. Whether its host is an address
// the operator allows is checked apart (controlplane/webhook), since that needs DNS.
func WebhookTarget(raw string) (*url.URL, error) {
	bad := func(detail string) error { return FieldError("url", "invalid_url", detail) }
	if len(raw) > MaxWebhookURL || TextProblem(raw) != "" {
		return nil, bad("Enter a valid URL of at most 2048 characters.")
	}
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() {
		return nil, bad("Enter a valid URL.")
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, bad("The URL must be http or https.")
	case u.User != nil:
		return nil, bad("The URL must not hold credentials: sign with the secret instead.")
	case u.Hostname() == "":
		return nil, bad("The URL has no host.")
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return nil, bad("The URL must not have a fragment.")
	case strings.ContainsAny(u.Hostname(), " %"):
		return nil, bad("The URL's host is not valid.")
	}
	if p := u.Port(); p != "" {
		if _, err := net.LookupPort("tcp", p); err != nil || p == "0" {
			return nil, bad("The URL's port is not valid.")
		}
	}
	return u, nil
}

// Object types of webhook events: what WebhookEvent.Object holds.
const (
	ObjectFlag            = "FeatureFlag"
	ObjectAnnotation      = "Annotation"
	ObjectScheduledChange = "ScheduledChange"
	// ObjectChangeRequest events carry a ChangeRequestEvent, already in its delivered form.
	ObjectChangeRequest = "ChangeRequest"
)

// WebhookEvent is one event, as it is enqueued in the transaction of the write it reports:
// one delivery per enabled hook of the project that subscribes to its kind.
type WebhookEvent struct {
	ProjectID int64
	Kind      string
	Actor     *User // nil for the system
	// SnapshotVersion is the project's snapshot version that contains the change.
	SnapshotVersion int64
	// ObjectType says what Object is: ObjectFlag (a *Flag), ObjectAnnotation (an
	// *Annotation), ObjectScheduledChange (a *ScheduledChange), ObjectChangeRequest (a
	// ChangeRequestEvent, delivered as it is).
	ObjectType string
	Object     any
}

// WebhookDelivery is one event's delivery to one hook, as its log shows it.
type WebhookDelivery struct {
	ID             string // the delivery's uuid, also in the body and the X-Flagedge-Delivery header
	EventID        string // the event's uuid, the same for every hook (X-Flagedge-Event-Id)
	WebhookID      int64
	Kind           string
	Status         string // DeliveryPending, DeliveryDelivered, DeliveryFailed
	Attempts       int
	LastStatusCode *int
	LastError      string
	ResponsePrefix string // the start of the last answer's body
	NextAttemptAt  *time.Time
	CreatedAt      time.Time
	UpdatedAt      time.Time
	DeliveredAt    *time.Time
}

// WebhookService manages a project's webhooks and reads their delivery logs. Only an admin
// of the project's organisation (CanAdminOrg) reads or changes them, since a hook sends the
// project's changes (and who made them) to any address: every call acts as the user of the
// context (CurrentUser), NotAuthenticated without one, PermissionDenied for anyone else,
// whether the project exists or not.
type WebhookService interface {
	FindWebhooks(ctx context.Context, projectID int64, limit, offset int) ([]*Webhook, int, error)
	FindWebhookByID(ctx context.Context, projectID, id int64) (*Webhook, error)
	// CreateWebhook creates a hook of the project, made by the user ctx acts as.
	CreateWebhook(ctx context.Context, projectID int64, upd WebhookUpdate) (*Webhook, error)
	UpdateWebhook(ctx context.Context, projectID, id int64, upd WebhookUpdate) (*Webhook, error)
	DeleteWebhook(ctx context.Context, projectID, id int64) error
	// FindDeliveries returns a page of the hook's deliveries, newest first, and the total.
	FindDeliveries(ctx context.Context, projectID, webhookID int64, limit, offset int) ([]*WebhookDelivery, int, error)
}

// PendingDelivery is a delivery a dispatcher has claimed: where to send it, signed with
// what, and the event it reports as it was enqueued (its object stored as encoding/json
// writes the domain type named by ObjectType). Retries stop 24 h after CreatedAt.
type PendingDelivery struct {
	ID              string
	EventID         string
	WebhookID       int64
	ProjectID       int64
	Kind            string
	URL             string
	Secret          string
	Actor           *User
	SnapshotVersion int64
	ObjectType      string
	Object          json.RawMessage
	Attempts        int // attempts made before this one
	CreatedAt       time.Time
}

// DeliveryResult is the outcome of one attempt.
type DeliveryResult struct {
	// Status is DeliveryDelivered, DeliveryFailed (given up) or DeliveryPending (retry at
	// NextAttemptAt).
	Status         string
	StatusCode     *int
	Error          string
	ResponsePrefix string
	NextAttemptAt  time.Time
}

// SystemWebhookOutbox is the durable queue of deliveries that the dispatchers of every
// replica share: a claimed delivery is leased to one dispatcher until it reports the outcome
// or the lease runs out. It is system-level, unchecked access: it acts for no user and hands
// out the deliveries of every project with their hooks' URLs and secrets. Only the webhook
// dispatcher (controlplane/webhook.Dispatcher), a system actor, holds it; users reach hooks
// and their delivery logs through WebhookService.
type SystemWebhookOutbox interface {
	// Claim leases up to n due deliveries for lease, taking hooks in turn and leaving each
	// hook with at most perHook deliveries under lease, those of every dispatcher counted: a
	// slow or dead receiver then holds at most perHook of the dispatchers' slots, and the
	// other hooks' deliveries do not wait behind its backlog.
	Claim(ctx context.Context, n, perHook int, lease time.Duration) ([]*PendingDelivery, error)
	// Finish records an attempt's outcome and ends the lease.
	Finish(ctx context.Context, id string, res DeliveryResult) error
	// NextDue is when Claim, with the same perHook, may next find a delivery (zero time:
	// none pending). A hook with perHook deliveries under lease counts from its next delivery
	// not yet due (a retry, or a lease that runs out), not from its backlog: the dispatcher
	// that holds the lease claims again when the attempt ends.
	NextDue(ctx context.Context, perHook int) (time.Time, error)
	// Depth counts the deliveries not yet delivered nor given up.
	Depth(ctx context.Context) (int, error)
}

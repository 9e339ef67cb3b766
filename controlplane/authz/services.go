package authz

import (
	"context"

	"github.com/flagedge/flagedge/controlplane"
)

// Compile-time checks that every wrapper implements the service it guards.
var (
	_ controlplane.ProjectService            = projects{}
	_ controlplane.EventReader               = events{}
	_ controlplane.AnnotationService         = annotations{}
	_ controlplane.EarlyAccessFeatureService = features{}
	_ controlplane.UserService               = users{}
	_ controlplane.KeyService                = keys{}
)

// actorIn checks that actor is the user ctx acts as and that it reaches the project.
func (g *guard) actorIn(ctx context.Context, actor *controlplane.User, projectID int64) error {
	if err := g.sameUser(ctx, actor); err != nil {
		return err
	}
	_, _, err := g.project(ctx, projectID)
	return err
}

// in checks that the user ctx acts as reaches the project.
func (g *guard) in(ctx context.Context, projectID int64) error {
	_, _, err := g.project(ctx, projectID)
	return err
}

type projects struct{ g *guard }

func (w projects) FindProjectByID(ctx context.Context, id int64) (*controlplane.Project, error) {
	_, p, err := w.g.project(ctx, id)
	return p, err
}

// FindProjectByToken passes through: the public token admits whoever holds it (the SDK
// definitions), and what a user may then see of the project is the caller's check.
func (w projects) FindProjectByToken(ctx context.Context, token string) (*controlplane.Project, error) {
	return w.g.s.Projects.FindProjectByToken(ctx, token)
}

func (w projects) FindProjects(ctx context.Context, f controlplane.ProjectFilter) ([]*controlplane.Project, int, error) {
	if _, err := w.g.org(ctx, f.OrganizationID); err != nil {
		return nil, 0, err
	}
	return w.g.s.Projects.FindProjects(ctx, f)
}

func (w projects) CreateProject(ctx context.Context, orgID int64, name string) (*controlplane.Project, error) {
	if _, err := w.g.org(ctx, orgID); err != nil {
		return nil, err
	}
	return w.g.s.Projects.CreateProject(ctx, orgID, name)
}

func (w projects) UpdateProject(ctx context.Context, id int64, upd controlplane.ProjectUpdate) (*controlplane.Project, error) {
	if err := w.g.in(ctx, id); err != nil {
		return nil, err
	}
	return w.g.s.Projects.UpdateProject(ctx, id, upd)
}

type events struct{ g *guard }

func (w events) FindEvents(ctx context.Context, f controlplane.EventFilter) ([]*controlplane.Event, int, error) {
	if err := w.g.in(ctx, f.ProjectID); err != nil {
		return nil, 0, err
	}
	return w.g.s.Events.FindEvents(ctx, f)
}

func (w events) FindEventByUUID(ctx context.Context, projectID int64, uuid string) (*controlplane.Event, error) {
	if err := w.g.in(ctx, projectID); err != nil {
		return nil, err
	}
	return w.g.s.Events.FindEventByUUID(ctx, projectID, uuid)
}

func (w events) FindPersons(ctx context.Context, f controlplane.PersonFilter) ([]*controlplane.Person, int, error) {
	if err := w.g.in(ctx, f.ProjectID); err != nil {
		return nil, 0, err
	}
	return w.g.s.Events.FindPersons(ctx, f)
}

func (w events) FindPersonByID(ctx context.Context, projectID, id int64) (*controlplane.Person, error) {
	if err := w.g.in(ctx, projectID); err != nil {
		return nil, err
	}
	return w.g.s.Events.FindPersonByID(ctx, projectID, id)
}

func (w events) FindGroups(ctx context.Context, f controlplane.GroupFilter) ([]*controlplane.Group, int, error) {
	if err := w.g.in(ctx, f.ProjectID); err != nil {
		return nil, 0, err
	}
	return w.g.s.Events.FindGroups(ctx, f)
}

type annotations struct{ g *guard }

// inProjectOf checks that the project and organisation named belong together and to the
// user ctx acts as (organisation-wide annotations are seen from every project).
func (w annotations) inProjectOf(ctx context.Context, projectID, orgID int64) error {
	_, p, err := w.g.project(ctx, projectID)
	if err == nil && p.OrganizationID != orgID {
		err = controlplane.ErrPermissionDenied
	}
	return err
}

func (w annotations) FindAnnotations(ctx context.Context, f controlplane.AnnotationFilter) ([]*controlplane.Annotation, int, error) {
	if err := w.inProjectOf(ctx, f.ProjectID, f.OrganizationID); err != nil {
		return nil, 0, err
	}
	return w.g.s.Annotations.FindAnnotations(ctx, f)
}

func (w annotations) FindAnnotationByID(ctx context.Context, projectID, orgID, id int64) (*controlplane.Annotation, error) {
	if err := w.inProjectOf(ctx, projectID, orgID); err != nil {
		return nil, err
	}
	return w.g.s.Annotations.FindAnnotationByID(ctx, projectID, orgID, id)
}

func (w annotations) CreateAnnotation(ctx context.Context, actor *controlplane.User, project *controlplane.Project, upd controlplane.AnnotationUpdate) (*controlplane.Annotation, error) {
	if err := w.g.actorIn(ctx, actor, project.ID); err != nil {
		return nil, err
	}
	return w.g.s.Annotations.CreateAnnotation(ctx, actor, project, upd)
}

func (w annotations) UpdateAnnotation(ctx context.Context, actor *controlplane.User, project *controlplane.Project, id int64, upd controlplane.AnnotationUpdate) (*controlplane.Annotation, error) {
	if err := w.g.actorIn(ctx, actor, project.ID); err != nil {
		return nil, err
	}
	return w.g.s.Annotations.UpdateAnnotation(ctx, actor, project, id, upd)
}

type features struct{ g *guard }

func (w features) FindEarlyAccessFeatures(ctx context.Context, projectID int64, limit, offset int) ([]*controlplane.EarlyAccessFeature, int, error) {
	if err := w.g.in(ctx, projectID); err != nil {
		return nil, 0, err
	}
	return w.g.s.Features.FindEarlyAccessFeatures(ctx, projectID, limit, offset)
}

func (w features) FindEarlyAccessFeatureByID(ctx context.Context, projectID int64, id string) (*controlplane.EarlyAccessFeature, error) {
	if err := w.g.in(ctx, projectID); err != nil {
		return nil, err
	}
	return w.g.s.Features.FindEarlyAccessFeatureByID(ctx, projectID, id)
}

func (w features) CreateEarlyAccessFeature(ctx context.Context, actor *controlplane.User, projectID int64, upd controlplane.EarlyAccessFeatureUpdate) (*controlplane.EarlyAccessFeature, error) {
	if err := w.g.actorIn(ctx, actor, projectID); err != nil {
		return nil, err
	}
	return w.g.s.Features.CreateEarlyAccessFeature(ctx, actor, projectID, upd)
}

func (w features) UpdateEarlyAccessFeature(ctx context.Context, actor *controlplane.User, projectID int64, id string, upd controlplane.EarlyAccessFeatureUpdate) (*controlplane.EarlyAccessFeature, error) {
	if err := w.g.actorIn(ctx, actor, projectID); err != nil {
		return nil, err
	}
	return w.g.s.Features.UpdateEarlyAccessFeature(ctx, actor, projectID, id, upd)
}

func (w features) DeleteEarlyAccessFeature(ctx context.Context, actor *controlplane.User, projectID int64, id string) error {
	if err := w.g.actorIn(ctx, actor, projectID); err != nil {
		return err
	}
	return w.g.s.Features.DeleteEarlyAccessFeature(ctx, actor, projectID, id)
}

// users guards the organisation's membership; the log-in calls (passwords) pass through:
// they establish who the user is.
type users struct{ g *guard }

func (w users) FindUserByID(ctx context.Context, id int64) (*controlplane.User, error) {
	u, err := w.g.user(ctx)
	if err != nil {
		return nil, err
	}
	found, err := w.g.s.Users.FindUserByID(ctx, id)
	if err == nil && found.OrganizationID != u.OrganizationID {
		return nil, controlplane.ErrNotFound
	}
	return found, err
}

func (w users) FindOrganization(ctx context.Context, id int64) (*controlplane.Organization, error) {
	if _, err := w.g.org(ctx, id); err != nil {
		return nil, err
	}
	return w.g.s.Users.FindOrganization(ctx, id)
}

func (w users) FindMembers(ctx context.Context, orgID int64, limit, offset int) ([]*controlplane.Member, int, error) {
	if _, err := w.g.org(ctx, orgID); err != nil {
		return nil, 0, err
	}
	return w.g.s.Users.FindMembers(ctx, orgID, limit, offset)
}

func (w users) InviteMember(ctx context.Context, actor *controlplane.User, req controlplane.InviteRequest) (*controlplane.Invite, error) {
	if err := w.g.sameUser(ctx, actor); err != nil {
		return nil, err
	}
	if _, err := w.g.admin(ctx); err != nil {
		return nil, err
	}
	return w.g.s.Users.InviteMember(ctx, actor, req)
}

func (w users) RemoveMember(ctx context.Context, actor *controlplane.User, userUUID string) error {
	if err := w.g.sameUser(ctx, actor); err != nil {
		return err
	}
	if _, err := w.g.admin(ctx); err != nil {
		return err
	}
	return w.g.s.Users.RemoveMember(ctx, actor, userUUID)
}

func (w users) SetPassword(ctx context.Context, email, password string) (*controlplane.User, error) {
	return w.g.s.Users.SetPassword(ctx, email, password)
}

func (w users) SetPasswordWithToken(ctx context.Context, token, password string) (*controlplane.User, error) {
	return w.g.s.Users.SetPasswordWithToken(ctx, token, password)
}

func (w users) CheckPassword(ctx context.Context, email, password string) (*controlplane.User, error) {
	return w.g.s.Users.CheckPassword(ctx, email, password)
}

// keys lets a user manage only their own personal API keys.
type keys struct{ g *guard }

func (w keys) self(ctx context.Context, userID int64) error {
	u, err := w.g.user(ctx)
	if err == nil && u.ID != userID {
		err = controlplane.ErrPermissionDenied
	}
	return err
}

func (w keys) FindKeys(ctx context.Context, userID int64) ([]*controlplane.PersonalKey, error) {
	if err := w.self(ctx, userID); err != nil {
		return nil, err
	}
	return w.g.s.Keys.FindKeys(ctx, userID)
}

func (w keys) FindKeyByID(ctx context.Context, userID, id int64) (*controlplane.PersonalKey, error) {
	if err := w.self(ctx, userID); err != nil {
		return nil, err
	}
	return w.g.s.Keys.FindKeyByID(ctx, userID, id)
}

func (w keys) CreateKey(ctx context.Context, user *controlplane.User, upd controlplane.KeyUpdate) (*controlplane.PersonalKey, string, error) {
	if err := w.g.sameUser(ctx, user); err != nil {
		return nil, "", err
	}
	return w.g.s.Keys.CreateKey(ctx, user, upd)
}

func (w keys) UpdateKey(ctx context.Context, user *controlplane.User, id int64, upd controlplane.KeyUpdate) (*controlplane.PersonalKey, error) {
	if err := w.g.sameUser(ctx, user); err != nil {
		return nil, err
	}
	return w.g.s.Keys.UpdateKey(ctx, user, id, upd)
}

func (w keys) DeleteKey(ctx context.Context, userID, id int64) error {
	if err := w.self(ctx, userID); err != nil {
		return err
	}
	return w.g.s.Keys.DeleteKey(ctx, userID, id)
}

// webhooks guards a project's webhooks: only an admin of the project's organisation reads or
// changes them, since a hook sends the project's changes (and who made them) to any address.
type webhooks struct{ g *guard }

var _ controlplane.WebhookService = webhooks{}

// admin checks that the user ctx acts as reaches the project and administers its organisation.
func (w webhooks) admin(ctx context.Context, projectID int64) error {
	u, _, err := w.g.project(ctx, projectID)
	if err == nil && !u.IsAdmin() {
		err = controlplane.ErrPermissionDenied
	}
	return err
}

func (w webhooks) FindWebhooks(ctx context.Context, projectID int64, limit, offset int) ([]*controlplane.Webhook, int, error) {
	if err := w.admin(ctx, projectID); err != nil {
		return nil, 0, err
	}
	return w.g.s.Webhooks.FindWebhooks(ctx, projectID, limit, offset)
}

func (w webhooks) FindWebhookByID(ctx context.Context, projectID, id int64) (*controlplane.Webhook, error) {
	if err := w.admin(ctx, projectID); err != nil {
		return nil, err
	}
	return w.g.s.Webhooks.FindWebhookByID(ctx, projectID, id)
}

func (w webhooks) CreateWebhook(ctx context.Context, actor *controlplane.User, projectID int64, upd controlplane.WebhookUpdate) (*controlplane.Webhook, error) {
	if err := w.g.sameUser(ctx, actor); err != nil {
		return nil, err
	}
	if err := w.admin(ctx, projectID); err != nil {
		return nil, err
	}
	return w.g.s.Webhooks.CreateWebhook(ctx, actor, projectID, upd)
}

func (w webhooks) UpdateWebhook(ctx context.Context, projectID, id int64, upd controlplane.WebhookUpdate) (*controlplane.Webhook, error) {
	if err := w.admin(ctx, projectID); err != nil {
		return nil, err
	}
	return w.g.s.Webhooks.UpdateWebhook(ctx, projectID, id, upd)
}

func (w webhooks) DeleteWebhook(ctx context.Context, projectID, id int64) error {
	if err := w.admin(ctx, projectID); err != nil {
		return err
	}
	return w.g.s.Webhooks.DeleteWebhook(ctx, projectID, id)
}

func (w webhooks) FindDeliveries(ctx context.Context, projectID, webhookID int64, limit, offset int) ([]*controlplane.WebhookDelivery, int, error) {
	if err := w.admin(ctx, projectID); err != nil {
		return nil, 0, err
	}
	return w.g.s.Webhooks.FindDeliveries(ctx, projectID, webhookID, limit, offset)
}

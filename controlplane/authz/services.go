package authz

import (
	"context"

	"github.com/flagedge/flagedge/controlplane"
)

// Compile-time checks that every wrapper implements the service it guards.
var (
	_ controlplane.FlagService      = flags{}
	_ controlplane.ActivityService  = activity{}
	_ controlplane.RoleService      = roles{}
	_ controlplane.CohortService    = cohorts{}
	_ controlplane.DashboardService = dashboards{}
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

type flags struct{ g *guard }

func (w flags) FindFlagByID(ctx context.Context, projectID, id int64) (*controlplane.Flag, error) {
	if err := w.g.in(ctx, projectID); err != nil {
		return nil, err
	}
	return w.g.s.Flags.FindFlagByID(ctx, projectID, id)
}

func (w flags) FindFlags(ctx context.Context, f controlplane.FlagFilter) ([]*controlplane.Flag, int, error) {
	if err := w.g.in(ctx, f.ProjectID); err != nil {
		return nil, 0, err
	}
	return w.g.s.Flags.FindFlags(ctx, f)
}

func (w flags) CreateFlag(ctx context.Context, actor *controlplane.User, projectID int64, upd controlplane.FlagUpdate) (*controlplane.Flag, error) {
	if err := w.g.actorIn(ctx, actor, projectID); err != nil {
		return nil, err
	}
	return w.g.s.Flags.CreateFlag(ctx, actor, projectID, upd)
}

func (w flags) UpdateFlag(ctx context.Context, actor *controlplane.User, projectID, id int64, upd controlplane.FlagUpdate) (*controlplane.Flag, error) {
	if err := w.g.sameUser(ctx, actor); err != nil {
		return nil, err
	}
	if _, err := w.g.editable(ctx, projectID, id); err != nil {
		return nil, err
	}
	return w.g.s.Flags.UpdateFlag(ctx, actor, projectID, id, upd)
}

type activity struct{ g *guard }

func (w activity) FindActivity(ctx context.Context, f controlplane.ActivityFilter) ([]*controlplane.Activity, int, error) {
	if err := w.g.in(ctx, f.ProjectID); err != nil {
		return nil, 0, err
	}
	return w.g.s.Activity.FindActivity(ctx, f)
}

type roles struct{ g *guard }

func (w roles) FindRoles(ctx context.Context, orgID int64, limit, offset int) ([]*controlplane.Role, int, error) {
	if _, err := w.g.org(ctx, orgID); err != nil {
		return nil, 0, err
	}
	return w.g.s.Roles.FindRoles(ctx, orgID, limit, offset)
}

func (w roles) FindRoleByID(ctx context.Context, orgID int64, id string) (*controlplane.Role, error) {
	if _, err := w.g.org(ctx, orgID); err != nil {
		return nil, err
	}
	return w.g.s.Roles.FindRoleByID(ctx, orgID, id)
}

func (w roles) CreateRole(ctx context.Context, actor *controlplane.User, upd controlplane.RoleUpdate) (*controlplane.Role, error) {
	if err := w.g.sameUser(ctx, actor); err != nil {
		return nil, err
	}
	if err := w.g.orgAdmin(ctx, actor.OrganizationID); err != nil {
		return nil, err
	}
	return w.g.s.Roles.CreateRole(ctx, actor, upd)
}

func (w roles) UpdateRole(ctx context.Context, orgID int64, id string, upd controlplane.RoleUpdate) (*controlplane.Role, error) {
	if err := w.g.orgAdmin(ctx, orgID); err != nil {
		return nil, err
	}
	return w.g.s.Roles.UpdateRole(ctx, orgID, id, upd)
}

func (w roles) DeleteRole(ctx context.Context, orgID int64, id string) error {
	if err := w.g.orgAdmin(ctx, orgID); err != nil {
		return err
	}
	return w.g.s.Roles.DeleteRole(ctx, orgID, id)
}

func (w roles) FindMemberships(ctx context.Context, orgID int64, roleID string, limit, offset int) ([]*controlplane.RoleMembership, int, error) {
	if _, err := w.g.org(ctx, orgID); err != nil {
		return nil, 0, err
	}
	return w.g.s.Roles.FindMemberships(ctx, orgID, roleID, limit, offset)
}

func (w roles) AddMember(ctx context.Context, orgID int64, roleID, userUUID string) (*controlplane.RoleMembership, error) {
	if err := w.g.orgAdmin(ctx, orgID); err != nil {
		return nil, err
	}
	return w.g.s.Roles.AddMember(ctx, orgID, roleID, userUUID)
}

func (w roles) RemoveMember(ctx context.Context, orgID int64, roleID, membershipID string) error {
	if err := w.g.orgAdmin(ctx, orgID); err != nil {
		return err
	}
	return w.g.s.Roles.RemoveMember(ctx, orgID, roleID, membershipID)
}

func (w roles) FindRoleAccess(ctx context.Context, projectID, flagID int64, limit, offset int) ([]*controlplane.RoleAccess, int, error) {
	if err := w.g.in(ctx, projectID); err != nil {
		return nil, 0, err
	}
	return w.g.s.Roles.FindRoleAccess(ctx, projectID, flagID, limit, offset)
}

func (w roles) FindRoleAccessByID(ctx context.Context, projectID, flagID, id int64) (*controlplane.RoleAccess, error) {
	if err := w.g.in(ctx, projectID); err != nil {
		return nil, err
	}
	return w.g.s.Roles.FindRoleAccessByID(ctx, projectID, flagID, id)
}

func (w roles) CreateRoleAccess(ctx context.Context, projectID, flagID int64, roleID string) (*controlplane.RoleAccess, error) {
	if _, err := w.g.editable(ctx, projectID, flagID); err != nil {
		return nil, err
	}
	return w.g.s.Roles.CreateRoleAccess(ctx, projectID, flagID, roleID)
}

func (w roles) DeleteRoleAccess(ctx context.Context, projectID, flagID, id int64) error {
	if _, err := w.g.editable(ctx, projectID, flagID); err != nil {
		return err
	}
	return w.g.s.Roles.DeleteRoleAccess(ctx, projectID, flagID, id)
}

// EditableFlags answers for the user ctx acts as, whichever user is named: a user learns
// only what they may do themselves.
func (w roles) EditableFlags(ctx context.Context, _ *controlplane.User, flagIDs []int64) (map[int64]bool, error) {
	u, err := w.g.user(ctx)
	if err != nil {
		return nil, err
	}
	return w.g.s.Roles.EditableFlags(ctx, u, flagIDs)
}

type cohorts struct{ g *guard }

func (w cohorts) FindCohorts(ctx context.Context, projectID int64, limit, offset int) ([]*controlplane.Cohort, int, error) {
	if err := w.g.in(ctx, projectID); err != nil {
		return nil, 0, err
	}
	return w.g.s.Cohorts.FindCohorts(ctx, projectID, limit, offset)
}

func (w cohorts) FindCohortByID(ctx context.Context, projectID, id int64) (*controlplane.Cohort, error) {
	if err := w.g.in(ctx, projectID); err != nil {
		return nil, err
	}
	return w.g.s.Cohorts.FindCohortByID(ctx, projectID, id)
}

func (w cohorts) CreateCohort(ctx context.Context, actor *controlplane.User, projectID int64, upd controlplane.CohortUpdate) (*controlplane.Cohort, error) {
	if err := w.g.actorIn(ctx, actor, projectID); err != nil {
		return nil, err
	}
	return w.g.s.Cohorts.CreateCohort(ctx, actor, projectID, upd)
}

func (w cohorts) UpdateCohort(ctx context.Context, actor *controlplane.User, projectID, id int64, upd controlplane.CohortUpdate) (*controlplane.Cohort, error) {
	if err := w.g.actorIn(ctx, actor, projectID); err != nil {
		return nil, err
	}
	return w.g.s.Cohorts.UpdateCohort(ctx, actor, projectID, id, upd)
}

func (w cohorts) CreateStaticCohort(ctx context.Context, actor *controlplane.User, projectID, flagID int64, name string, persons func(yield func([]int64) error) error) (*controlplane.Cohort, error) {
	if err := w.g.sameUser(ctx, actor); err != nil {
		return nil, err
	}
	if _, err := w.g.editable(ctx, projectID, flagID); err != nil {
		return nil, err
	}
	return w.g.s.Cohorts.CreateStaticCohort(ctx, actor, projectID, flagID, name, persons)
}

func (w cohorts) SetCount(ctx context.Context, projectID, id int64, count int) error {
	if err := w.g.in(ctx, projectID); err != nil {
		return err
	}
	return w.g.s.Cohorts.SetCount(ctx, projectID, id, count)
}

type dashboards struct{ g *guard }

func (w dashboards) EnsureUsageDashboard(ctx context.Context, actor *controlplane.User, projectID, flagID int64) (*controlplane.Flag, error) {
	if err := w.g.sameUser(ctx, actor); err != nil {
		return nil, err
	}
	if _, err := w.g.editable(ctx, projectID, flagID); err != nil {
		return nil, err
	}
	return w.g.s.Dashboards.EnsureUsageDashboard(ctx, actor, projectID, flagID)
}

// schedules lets a user see the scheduled changes of the projects they reach, and schedule
// or cancel changes of the flags they may change. The scheduler applies a change through the
// guarded flags as its creator, so losing access to the flag fails the change.
type schedules struct{ g *guard }

var _ controlplane.ScheduledChangeService = schedules{}

func (w schedules) FindScheduledChanges(ctx context.Context, f controlplane.ScheduledChangeFilter) ([]*controlplane.ScheduledChange, int, error) {
	if err := w.g.in(ctx, f.ProjectID); err != nil {
		return nil, 0, err
	}
	return w.g.s.Schedules.FindScheduledChanges(ctx, f)
}

func (w schedules) FindScheduledChangeByID(ctx context.Context, projectID, id int64) (*controlplane.ScheduledChange, error) {
	if err := w.g.in(ctx, projectID); err != nil {
		return nil, err
	}
	return w.g.s.Schedules.FindScheduledChangeByID(ctx, projectID, id)
}

// CreateScheduledChange needs edit access to the flag; a record that is no flag of the
// project is PostHog's 400 "Feature flag not found".
func (w schedules) CreateScheduledChange(ctx context.Context, actor *controlplane.User, projectID int64, n controlplane.NewScheduledChange) (*controlplane.ScheduledChange, error) {
	if err := w.g.actorIn(ctx, actor, projectID); err != nil {
		return nil, err
	}
	if err := n.Validate(); err != nil {
		return nil, err
	}
	_, err := w.g.editable(ctx, projectID, n.FlagID())
	if controlplane.ErrorKind(err) == controlplane.NotFound {
		return nil, controlplane.ErrFlagNotFound
	}
	if err != nil {
		return nil, err
	}
	return w.g.s.Schedules.CreateScheduledChange(ctx, actor, projectID, n)
}

// UpdateScheduledChange needs edit access to the change's flag.
func (w schedules) UpdateScheduledChange(ctx context.Context, projectID, id int64, upd controlplane.ScheduledChangeUpdate) (*controlplane.ScheduledChange, error) {
	if err := w.g.in(ctx, projectID); err != nil {
		return nil, err
	}
	c, err := w.g.s.Schedules.FindScheduledChangeByID(ctx, projectID, id)
	if err != nil {
		return nil, err
	}
	if _, err := w.g.editable(ctx, projectID, c.FlagID()); err != nil {
		return nil, err
	}
	return w.g.s.Schedules.UpdateScheduledChange(ctx, projectID, id, upd)
}

// DeleteScheduledChange needs edit access to the change's flag.
func (w schedules) DeleteScheduledChange(ctx context.Context, projectID, id int64) error {
	if err := w.g.in(ctx, projectID); err != nil {
		return err
	}
	c, err := w.g.s.Schedules.FindScheduledChangeByID(ctx, projectID, id)
	if err != nil {
		return err
	}
	if _, err := w.g.editable(ctx, projectID, c.FlagID()); err != nil && controlplane.ErrorKind(err) != controlplane.NotFound {
		return err
	}
	return w.g.s.Schedules.DeleteScheduledChange(ctx, projectID, id)
}

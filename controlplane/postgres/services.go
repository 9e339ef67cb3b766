package postgres

import "github.com/flagedge/flagedge/controlplane"

// NewServices returns every service that acts for a user, on db: what the control plane
// serves and the tests build alike. bcryptCost is the password hashing cost
// (DefaultBcryptCost; tests pass bcrypt.MinCost). Each decides who may do what itself, from
// the user in the context (controlplane.CurrentUser), inside the transaction that reads or
// writes (controlplane/access.go); the ones that establish who the user is (Auth, Sessions,
// the password calls of Users) need none.
func NewServices(db *DB, bcryptCost int) controlplane.Services {
	flags := NewFlagService(db)
	return controlplane.Services{
		Auth:         NewAuthService(db),
		Projects:     NewProjectService(db),
		Flags:        flags,
		FlagCopies:   flags,
		Activity:     NewActivityService(db),
		Analytics:    NewEventReader(db),
		Annotations:  NewAnnotationService(db),
		Roles:        NewRoleService(db),
		Cohorts:      NewCohortService(db),
		EarlyAccess:  NewEarlyAccessFeatureService(db),
		Dashboards:   flags,
		Users:        NewUserService(db, bcryptCost),
		Keys:         NewKeyService(db),
		Sessions:     NewSessionService(db),
		Schedules:    NewScheduleStore(db),
		Webhooks:     NewWebhookService(db),
		Approvals:    NewApprovalStore(db),
		ReleasePlans: NewReleasePlanStore(db),

		EventDestinations: NewEventDestinationService(db),
	}
}

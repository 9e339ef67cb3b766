package controlplane

import "context"

type userKey struct{}

// NewContextWithUser returns ctx acting as user: the services decide what the call may do
// from this user alone (CurrentUser, access.go), whoever made the call — an API request with a personal key, a console session, or a background job acting
// on behalf of the user who scheduled it.
func NewContextWithUser(ctx context.Context, user *User) context.Context {
	return context.WithValue(ctx, userKey{}, user)
}

// UserFromContext returns the user ctx acts as, or nil.
func UserFromContext(ctx context.Context) *User {
	u, _ := ctx.Value(userKey{}).(*User)
	return u
}

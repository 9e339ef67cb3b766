package forward

import (
	"context"
	"errors"

	"github.com/flagedge/flagedge/controlplane"
)

// Checked returns s with the policy's check of the URL on every create and update: a
// destination, like a webhook, must not turn the control plane into a way into the network it
// runs in. The dispatcher checks the address it dials again (the policy's Control).
func Checked(s controlplane.EventDestinationService, p AddressPolicy) controlplane.EventDestinationService {
	return checked{EventDestinationService: s, p: p}
}

type checked struct {
	controlplane.EventDestinationService
	p AddressPolicy
}

func (c checked) CreateEventDestination(ctx context.Context, projectID int64, upd controlplane.EventDestinationUpdate) (*controlplane.EventDestination, error) {
	if err := c.check(ctx, upd); err != nil {
		return nil, err
	}
	return c.EventDestinationService.CreateEventDestination(ctx, projectID, upd)
}

func (c checked) UpdateEventDestination(ctx context.Context, projectID, id int64, upd controlplane.EventDestinationUpdate) (*controlplane.EventDestination, error) {
	if err := c.check(ctx, upd); err != nil {
		return nil, err
	}
	return c.EventDestinationService.UpdateEventDestination(ctx, projectID, id, upd)
}

// check checks the URL upd sets, if it sets one. The check may resolve the URL's host, so it
// is made only for an admin, whom alone the service lets write destinations: anyone else is
// refused first, as the service would.
func (c checked) check(ctx context.Context, upd controlplane.EventDestinationUpdate) error {
	u, err := controlplane.CurrentUser(ctx)
	if err != nil {
		return err
	}
	if !controlplane.CanAdminOrg(u, u.OrganizationID) {
		return controlplane.ErrPermissionDenied
	}
	if upd.URL == nil {
		return nil
	}
	err = c.p.CheckURL(ctx, *upd.URL)
	var e *controlplane.Error
	if errors.As(err, &e) && e.Code == "forbidden_address" {
		return controlplane.FieldError("url", e.Code, "The URL's host is, or resolves to, a private, loopback or otherwise non-public address: "+
			"event destinations reach only public addresses unless the operator allows private ones (--forward-allow-private).")
	}
	return err
}

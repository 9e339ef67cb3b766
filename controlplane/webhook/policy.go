package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"time"

	"github.com/flagedge/flagedge/controlplane"
)

// Policy decides which addresses webhooks may reach. By default only public unicast
// addresses: a hook must not turn the control plane into a way into the network it runs in
// (its database, cloud metadata at 169.254.169.254, other services on loopback). The same
// decision is made twice: when a hook is created or changed (the URL's host, resolved), and
// at every delivery on the address actually dialled (Control), so a name that resolves to a
// public address when checked and to a private one later (DNS rebinding) is still refused.
type Policy struct {
	// AllowPrivate admits every address (--webhook-allow-private): for receivers on the
	// operator's own network, and tests.
	AllowPrivate bool
	// Resolver resolves names when a hook is checked; nil means net.DefaultResolver.
	Resolver *net.Resolver
}

// refused are the ranges that are not public unicast beyond what netip's predicates cover.
var refused = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),   // carrier-grade NAT
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("198.51.100.0/24"), // documentation
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, and the broadcast address
	netip.MustParsePrefix("64:ff9b::/96"),    // NAT64: may reach any IPv4 address
	netip.MustParsePrefix("64:ff9b:1::/48"),  // local NAT64
	netip.MustParsePrefix("100::/64"),        // discard
	netip.MustParsePrefix("2001::/32"),       // Teredo: embeds an IPv4 address
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
	netip.MustParsePrefix("2002::/16"),       // 6to4: embeds an IPv4 address
}

// Allowed reports whether the policy lets a webhook reach ip.
func (p *Policy) Allowed(ip netip.Addr) bool {
	if p.AllowPrivate {
		return true
	}
	ip = ip.Unmap()
	if !ip.IsValid() || ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() {
		return false
	}
	for _, r := range refused {
		if r.Contains(ip) {
			return false
		}
	}
	return true
}

// errRefused marks a delivery refused by the policy: not retried.
var errRefused = errors.New("address refused")

// Control is a net.Dialer Control function: it refuses a connection to an address the
// policy does not allow, after DNS resolution, just before the connection is made.
func (p *Policy) Control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %s is not an IP address", errRefused, address)
	}
	if !p.Allowed(ap.Addr()) {
		return fmt.Errorf("%w: %s is private, loopback or otherwise not public (--webhook-allow-private admits it)", errRefused, ap.Addr())
	}
	return nil
}

// resolveTimeout bounds the look-up of a hook's host when it is checked.
const resolveTimeout = 2 * time.Second

// CheckURL checks a hook's URL for its form and, unless the policy allows every address,
// that its host is not, and does not resolve to, a refused address. A name that does not
// resolve now is accepted: each delivery checks the addresses it dials.
func (p *Policy) CheckURL(ctx context.Context, raw string) error {
	u, err := controlplane.WebhookTarget(raw)
	if err != nil || p.AllowPrivate {
		return err
	}
	refuse := func(why string) error {
		return controlplane.FieldError("url", "forbidden_address", "The URL's host "+why+
			": webhooks reach only public addresses unless the operator allows private ones (--webhook-allow-private).")
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if ip, err := netip.ParseAddr(host); err == nil {
		if !p.Allowed(ip) {
			return refuse("is a private, loopback or otherwise non-public address")
		}
		return nil
	}
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return refuse("is loopback")
	}
	r := p.Resolver
	if r == nil {
		r = net.DefaultResolver
	}
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	ips, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil
	}
	for _, ip := range ips {
		if !p.Allowed(ip) {
			return refuse("resolves to a private, loopback or otherwise non-public address")
		}
	}
	return nil
}

// Checked returns s with the policy's check of the URL on every create and update.
func Checked(s controlplane.WebhookService, p *Policy) controlplane.WebhookService {
	return checked{WebhookService: s, p: p}
}

type checked struct {
	controlplane.WebhookService
	p *Policy
}

func (c checked) CreateWebhook(ctx context.Context, projectID int64, upd controlplane.WebhookUpdate) (*controlplane.Webhook, error) {
	if err := c.check(ctx, upd); err != nil {
		return nil, err
	}
	return c.WebhookService.CreateWebhook(ctx, projectID, upd)
}

func (c checked) UpdateWebhook(ctx context.Context, projectID, id int64, upd controlplane.WebhookUpdate) (*controlplane.Webhook, error) {
	if err := c.check(ctx, upd); err != nil {
		return nil, err
	}
	return c.WebhookService.UpdateWebhook(ctx, projectID, id, upd)
}

// check checks the URL upd sets, if it sets one. The check may resolve the URL's host, so
// it is made only for an admin, whom alone the service lets write hooks (it checks the
// project's organisation itself): anyone else is refused first, as the service would.
func (c checked) check(ctx context.Context, upd controlplane.WebhookUpdate) error {
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
	return c.p.CheckURL(ctx, *upd.URL)
}

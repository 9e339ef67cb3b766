// Package cpclient is the edge's connection to the control plane's sync service: the
// addresses it fails over between, TLS, and the edge token every call carries.
package cpclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/flagedge/flagedge/internal/daemon"
	"github.com/flagedge/flagedge/shared/bloomkeys"
)

// Config says how to reach the control plane.
type Config struct {
	// Addrs is one "host:port" (a DNS name may have several records: each is tried), or a
	// comma-separated list of them; the edge uses one and fails over to the others.
	Addrs string
	// CAFile is the PEM file of the certificate authority that signed the control plane's
	// certificate; empty: the system's roots.
	CAFile string
	// Insecure talks plaintext to addresses that are not loopback (behind something else that
	// encrypts). Loopback addresses without CAFile are always plaintext.
	Insecure bool
	// Token is the edge's credential, sent with every call.
	Token string
	// Fallback is a comma-separated list of upstreams used only while none of Addrs answers
	// (a relay's edges given the control plane as a last resort); empty: none.
	Fallback string
}

// Addresses returns the configured addresses, the fallbacks last.
func (c Config) Addresses() []string { return append(list(c.Addrs), list(c.Fallback)...) }

// list splits a comma-separated list of addresses.
func list(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// Validate checks the addresses and that a CA file, if named, can be read.
func (c Config) Validate() error {
	addrs := c.Addresses()
	if len(list(c.Addrs)) == 0 {
		return errors.New("--control-plane: no address")
	}
	for _, a := range addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("--control-plane %q: %w", a, err)
		}
	}
	if _, err := c.transport(); err != nil {
		return err
	}
	return nil
}

// plaintext reports whether the link goes without TLS: asked for, or every address loopback
// and no CA named.
func (c Config) plaintext() bool {
	if c.CAFile != "" {
		return false
	}
	if c.Insecure {
		return true
	}
	for _, a := range c.Addresses() {
		if !daemon.IsLoopback(a) {
			return false
		}
	}
	return true
}

func (c Config) transport() (credentials.TransportCredentials, error) {
	if c.plaintext() {
		return insecure.NewCredentials(), nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("--control-plane-ca: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--control-plane-ca %s: no PEM certificate in it", c.CAFile)
		}
	}
	return credentials.NewTLS(cfg), nil
}

// resolverSeq names each manual resolver's scheme uniquely (schemes are registered per
// connection, and a process may hold several, as tests do).
var resolverSeq atomic.Int64

// WindowBytes is the flow-control window of the edge's connection and of each of its streams:
// what the control plane may send before the edge has read it. 4 MiB keeps 50 MB/s flowing
// over a link of 80 ms round trip, and is memory only while unread.
const WindowBytes = 4 << 20

// Dial returns a client connection to the control plane. It connects to one address, in a
// shuffled order, and when that one fails to the next: gRPC's pick_first policy over every
// address (a list here, or the records of a DNS name). With fallbacks, the addresses and the
// fallbacks are shuffled apart and the fallbacks put last, and pick_first, which starts again
// from the top of its list whenever its connection fails, takes a fallback only while no
// address answers.
func Dial(c Config) (*grpc.ClientConn, error) {
	creds, err := c.transport()
	if err != nil {
		return nil, err
	}
	// Edges given the same list spread over the replicas instead of all taking the first.
	serviceConfig := `{"loadBalancingConfig": [{"pick_first": {"shuffleAddressList": true}}]}`
	addrs := c.Addresses()
	if fallback := list(c.Fallback); len(fallback) > 0 {
		primary := list(c.Addrs)
		rand.Shuffle(len(primary), func(i, j int) { primary[i], primary[j] = primary[j], primary[i] })
		rand.Shuffle(len(fallback), func(i, j int) { fallback[i], fallback[j] = fallback[j], fallback[i] })
		addrs = append(primary, fallback...)
		serviceConfig = `{"loadBalancingConfig": [{"pick_first": {}}]}`
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultServiceConfig(serviceConfig),
		grpc.WithPerRPCCredentials(token(c.Token)),
		// The Watch stream lives for good: keepalives notice a dead control plane quickly.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 15 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}),
		// gRPC's default reconnect backoff grows to two minutes: after an outage the edge would
		// fail look-ups long after the control plane is back. Reconnect within a second.
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 100 * time.Millisecond,
			Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second}, MinConnectTimeout: 5 * time.Second}),
		// A project's membership filter comes in one message: about 2.4 MB per million distinct
		// ids, past gRPC's default limit of 4 MiB from under two million.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes)),
		// Fixed flow-control windows (WindowBytes) instead of gRPC's estimate of the link's
		// bandwidth-delay product: the estimate pings the control plane whenever data arrives,
		// which with thousands of edges is thousands of pings for every snapshot change.
		grpc.WithInitialWindowSize(WindowBytes), grpc.WithInitialConnWindowSize(WindowBytes),
	}
	target := "dns:///" + addrs[0]
	if len(addrs) > 1 {
		r := manual.NewBuilderWithScheme(fmt.Sprintf("flagedge-cp-%d", resolverSeq.Add(1)))
		state := resolver.State{}
		for _, a := range addrs {
			host, _, _ := net.SplitHostPort(a)
			// ServerName: each address's certificate is checked against its own host name.
			state.Addresses = append(state.Addresses, resolver.Address{Addr: a, ServerName: host})
		}
		r.InitialState(state)
		opts = append(opts, grpc.WithResolvers(r))
		target = r.Scheme() + ":///control-plane"
	}
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, fmt.Errorf("control plane client: %w", err)
	}
	return conn, nil
}

// token sends the edge token as "authorization: Bearer …" with every call.
type token string

func (t token) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	if t == "" {
		return nil, nil // the control plane answers Unauthenticated, which the edge logs
	}
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

// RequireTransportSecurity is false so that the token also goes over plaintext loopback;
// anything else is TLS unless the operator said --control-plane-insecure.
func (t token) RequireTransportSecurity() bool { return false }

// MaxMessageBytes is the largest message the edge accepts from the control plane: twice the
// largest membership filter it is sent (shared/bloomkeys.MaxFilterBytes).
const MaxMessageBytes = 2 * bloomkeys.MaxFilterBytes

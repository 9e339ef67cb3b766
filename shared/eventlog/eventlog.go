// Package eventlog is the contract of the event log that can sit between edges and the
// control plane: when it is configured, edges publish their spool records to a NATS
// JetStream stream instead of calling Ingest, and every control-plane replica consumes the
// stream. Both programs must agree on the stream and subject names, the headers and the
// message id, and take the same connection flags (servers, credentials, TLS); that is what
// this package holds.
package eventlog

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flagedge/flagedge/internal/daemon"
)

const (
	// StreamName is the JetStream stream holding captured events until a control plane
	// stores them.
	StreamName = "FLAGEDGE_EVENTS"
	// Subjects is the stream's subject filter: one subject per project, so that operators
	// can see (and, if ever needed, consume) one project's traffic apart.
	Subjects = "flagedge.events.>"
	// ConsumerName is the one durable pull consumer every control-plane replica fetches
	// from, so that the replicas share the work instead of each storing everything.
	ConsumerName = "flagedge-ingest"
	// HeaderEdgeID names the edge that captured a message's events, for the dead-letter
	// table and the logs, as the Ingest call's edge_id does.
	HeaderEdgeID = "Flagedge-Edge-Id"
)

// Subject is the subject a project's events are published on.
func Subject(projectID int64) string {
	return "flagedge.events." + strconv.FormatInt(projectID, 10)
}

// MsgID is the JetStream message id (Nats-Msg-Id) of a payload: a hash of its content, so an
// edge that publishes the same spool record again after a crash, before the spool recorded
// the acknowledgement, gets it de-duplicated by the stream. Past the stream's duplicate
// window the control plane's de-duplication by event uuid still stores nothing twice.
func MsgID(payload []byte) string {
	sum := sha256.Sum256(payload)
	return hex.EncodeToString(sum[:16])
}

// Config is how a program reaches the NATS servers. The zero value (no URL) means the event
// log is off and events take the direct gRPC path.
type Config struct {
	URL       string
	CredsFile string
	User      string
	Password  string
	Token     string
	CAFile    string
}

// Register adds the connection flags, each with its environment variable, to fs.
func (c *Config) Register(fs *daemon.Flags) {
	fs.String(&c.URL, "event-log-url", "FLAGEDGE_EVENT_LOG_URL", "", "NATS servers of the JetStream event log, comma-separated (nats://h1:4222,nats://h2:4222; tls:// for TLS); empty: events go straight to the control plane over gRPC")
	fs.String(&c.CredsFile, "event-log-creds", "FLAGEDGE_EVENT_LOG_CREDS", "", "NATS credentials file (JWT and NKey seed) for the event log")
	fs.String(&c.User, "event-log-user", "FLAGEDGE_EVENT_LOG_USER", "", "NATS user name for the event log; with --event-log-password")
	fs.String(&c.Password, "event-log-password", "FLAGEDGE_EVENT_LOG_PASSWORD", "", "NATS password of --event-log-user")
	fs.String(&c.Token, "event-log-token", "FLAGEDGE_EVENT_LOG_TOKEN", "", "NATS authentication token for the event log")
	fs.String(&c.CAFile, "event-log-ca", "FLAGEDGE_EVENT_LOG_CA", "", "CA certificate (PEM) of the NATS servers' TLS certificates; turns TLS on")
}

// Enabled reports whether events go through the event log.
func (c Config) Enabled() bool { return c.URL != "" }

// Validate checks the servers' URLs and that at most one way to authenticate is given.
func (c Config) Validate() error {
	if !c.Enabled() {
		if c.CredsFile != "" || c.User != "" || c.Token != "" || c.CAFile != "" {
			return errors.New("--event-log-creds, --event-log-user, --event-log-token and --event-log-ca need --event-log-url")
		}
		return nil
	}
	for _, s := range strings.Split(c.URL, ",") {
		u, err := url.Parse(strings.TrimSpace(s))
		if err != nil || u.Host == "" || (u.Scheme != "nats" && u.Scheme != "tls") {
			return fmt.Errorf("--event-log-url: %q is not a nats:// or tls:// URL", s)
		}
	}
	ways := 0
	for _, set := range []bool{c.CredsFile != "", c.User != "" || c.Password != "", c.Token != ""} {
		if set {
			ways++
		}
	}
	if ways > 1 {
		return errors.New("give one of --event-log-creds, --event-log-user/--event-log-password and --event-log-token")
	}
	if c.Password != "" && c.User == "" {
		return errors.New("--event-log-password needs --event-log-user")
	}
	return nil
}

// Connect connects to the NATS servers as name. It returns at once even when no server is
// reachable yet: the connection keeps trying, for good, so that a program started before
// NATS, or meeting a NATS outage, recovers by itself; what needs the servers meanwhile fails
// and is retried by its caller. Nothing is buffered while disconnected, so a publish fails
// at once instead of being acknowledged by nobody.
func (c Config) Connect(name string, log *slog.Logger) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.RetryOnFailedConnect(true),
		nats.ReconnectBufSize(-1),
		nats.Timeout(5 * time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("event log: disconnected from NATS", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("event log: connected to NATS", "server", nc.ConnectedUrlRedacted()) }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { log.Warn("event log: NATS error", "err", err) }),
	}
	switch {
	case c.CredsFile != "":
		opts = append(opts, nats.UserCredentials(c.CredsFile))
	case c.User != "":
		opts = append(opts, nats.UserInfo(c.User, c.Password))
	case c.Token != "":
		opts = append(opts, nats.Token(c.Token))
	}
	if c.CAFile != "" {
		opts = append(opts, nats.RootCAs(c.CAFile))
	}
	nc, err := nats.Connect(c.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("event log: %w", err)
	}
	return nc, nil
}

package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
)

// IsLoopback reports whether a listen or dial address ("host:port") names only this machine:
// a loopback IP or "localhost". An empty host (every interface) is not loopback.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// LoadTLS reads a certificate and its key for a listener; both or neither must be given.
// It returns nil when neither is.
func LoadTLS(certFile, keyFile, flagPrefix string) (*tls.Config, error) {
	switch {
	case certFile == "" && keyFile == "":
		return nil, nil
	case certFile == "" || keyFile == "":
		return nil, fmt.Errorf("--%s-cert and --%s-key go together", flagPrefix, flagPrefix)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("--%s-cert/--%s-key: %w", flagPrefix, flagPrefix, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// ServeMetrics serves reg's metrics at /metrics on a listener of its own at addr until ctx
// ends. It is for --metrics-addr: the metrics then stay off the public listener.
func ServeMetrics(ctx context.Context, g *errgroup.Group, addr string, reg *prometheus.Registry, log *slog.Logger) error {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	bound, err := ServeHTTP(ctx, g, addr, mux)
	if err != nil {
		return fmt.Errorf("--metrics-addr: %w", err)
	}
	log.Info("metrics listening", "metrics_addr", bound.String())
	return nil
}

// ServeHTTP serves h on a listener at addr, bound now (so that "address in use" fails at
// start), in g until ctx ends; it returns the address bound. It is for the side listeners
// (metrics, profiling) beside a program's main one.
func ServeHTTP(ctx context.Context, g *errgroup.Group, addr string, h http.Handler) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	// Side listeners serve a few small GETs to operators' tools: short timeouts and small
	// headers, so that nobody can hold their connections open.
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, IdleTimeout: time.Minute,
		MaxHeaderBytes: 64 << 10}
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	g.Go(func() error {
		<-ctx.Done()
		return srv.Close()
	})
	return ln.Addr(), nil
}

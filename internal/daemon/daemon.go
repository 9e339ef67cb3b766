// Package daemon holds the process set-up both binaries share: flag defaults from the
// environment, the JSON logger, and the Prometheus registry with Go and process metrics.
package daemon

import (
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// EnvOr returns the environment variable env when it is set, else def: the default of a flag
// that the environment may override.
func EnvOr(env, def string) string {
	if v, ok := os.LookupEnv(env); ok {
		return v
	}
	return def
}

// NewLogger returns a logger writing JSON lines to w at the named level (debug, info, warn,
// error).
func NewLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// NewRegistry returns a metrics registry with the Go runtime and process collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Package daemon holds the process set-up both binaries share: flags that each have an
// environment variable, the JSON logger, and the Prometheus registry with Go and process
// metrics.
package daemon

import (
	"fmt"
	"io"
	"log/slog"
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/flagedge/flagedge/internal/version"
)

// NewLogger returns a logger writing JSON lines to w at the named level (debug, info, warn,
// error). Durations are written as Go writes them ("1.5s"), not as nanoseconds.
func NewLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l, ReplaceAttr: durationsAsText})), nil
}

func durationsAsText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// NewRegistry returns a metrics registry with the Go runtime and process collectors and
// flagedge_build_info, which says which build is running (1, labelled by version and commit).
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	v, c := version.Get()
	info := prometheus.NewGauge(prometheus.GaugeOpts{Name: "flagedge_build_info", Help: "The running build: always 1, labelled by version, commit and Go version.",
		ConstLabels: prometheus.Labels{"version": v, "commit": c, "goversion": runtime.Version()}})
	info.Set(1)
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), info)
	return reg
}

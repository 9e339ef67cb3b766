// Package clientconfig is the client configuration the edge gives browser SDKs: the same
// members in every /decide and /flags answer that carries configuration and in the remote
// config posthog-js loads first (/array/{token}/config), so the two never disagree. The
// members depend on the project's switches (Config); the edge builds them once per snapshot.
package clientconfig

import (
	"encoding/json"

	"github.com/flagedge/flagedge/edge/jsonenc"
)

// Config holds a project's switches, with PostHog's names for them.
type Config struct {
	// AutocaptureOptOut turns posthog-js's autocapture off ("autocapture_opt_out": true).
	AutocaptureOptOut bool
	// SessionRecordingOptIn is stored and shown, but recording stays off: the edge has no
	// recording endpoint, so "sessionRecording" is always false.
	SessionRecordingOptIn bool
	// HeatmapsOptIn turns heatmap collection on ("heatmaps": true).
	HeatmapsOptIn bool
	// CaptureConsoleLogOptIn is part of session recording in PostHog; stored, no effect while
	// recording is off.
	CaptureConsoleLogOptIn bool
	// CapturePerformanceOptIn turns network timing on ("capturePerformance").
	CapturePerformanceOptIn bool
	// AutocaptureExceptionsOptIn turns exception autocapture on ("autocaptureExceptions").
	AutocaptureExceptionsOptIn bool
}

// Members returns the configuration members of an answer for c, without the surrounding
// braces. supportedCompression lists what the edge decodes and SDKs choose from: gzip
// (posthog-js prefers gzip-js when listed) — lz64 and base64 are accepted too, but no SDK
// needs to be told.
func Members(c Config) []byte {
	b := make([]byte, 0, 512)
	b = append(b, `"config":{"enable_collect_everything":true},"editorParams":{},"isAuthenticated":false,`...)
	b = append(b, `"supportedCompression":["gzip","gzip-js"],"sessionRecording":false,"capturePerformance":`...)
	if c.CapturePerformanceOptIn {
		b = append(b, `{"network_timing":true,"web_vitals":false,"web_vitals_allowed_metrics":null}`...)
	} else {
		b = append(b, "false"...)
	}
	b = append(b, `,"autocapture_opt_out":`...)
	b = jsonenc.AppendBool(b, c.AutocaptureOptOut)
	b = append(b, `,"autocaptureExceptions":`...)
	b = jsonenc.AppendBool(b, c.AutocaptureExceptionsOptIn)
	b = append(b, `,"heatmaps":`...)
	b = jsonenc.AppendBool(b, c.HeatmapsOptIn)
	return append(b, `,"siteApps":[],"surveys":false,"defaultIdentifiedOnly":true`...)
}

// Remote returns the remote config object of the project with the given token and
// configuration members.
func Remote(token string, members []byte) []byte {
	b := make([]byte, 0, len(members)+64+len(token))
	b = append(b, `{"token":`...)
	b = jsonenc.AppendString(b, token)
	b = append(b, ',')
	b = append(b, members...)
	return append(b, `,"hasFeatureFlags":true}`...)
}

// RemoteJS returns the remote config as the script /array/{token}/config.js serves: it
// records the config object for posthog-js under window._POSTHOG_REMOTE_CONFIG[token].
func RemoteJS(token string, remote []byte) []byte {
	quoted, _ := json.Marshal(token) // a string always marshals
	b := make([]byte, 0, len(remote)+256)
	b = append(b, "(function() {\n  window._POSTHOG_REMOTE_CONFIG = window._POSTHOG_REMOTE_CONFIG || {};\n  window._POSTHOG_REMOTE_CONFIG["...)
	b = append(b, quoted...)
	b = append(b, "] = {\n    config: "...)
	b = append(b, remote...)
	return append(b, ",\n    siteApps: []\n  };\n})();\n"...)
}

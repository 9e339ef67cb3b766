// Package clientconfig is the client configuration the edge gives browser SDKs: the same
// members in every /decide and /flags answer that carries configuration and in the remote
// config posthog-js loads first (/array/{token}/config), so the two never disagree.
package clientconfig

import "github.com/flagedge/flagedge/edge/jsonenc"

// Members are the configuration members of an answer, without the surrounding braces.
// supportedCompression lists what the edge decodes and SDKs choose from: gzip (posthog-js
// prefers gzip-js when listed) — lz64 and base64 are accepted too, but no SDK needs to be told.
const Members = `"config":{"enable_collect_everything":true},"editorParams":{},"isAuthenticated":false,` +
	`"supportedCompression":["gzip","gzip-js"],"sessionRecording":false,"capturePerformance":false,` +
	`"autocapture_opt_out":false,"siteApps":[],"surveys":false,"heatmaps":false,"defaultIdentifiedOnly":true`

// Remote returns the remote config object of the project with the given token.
func Remote(token string) []byte {
	b := make([]byte, 0, len(Members)+64+len(token))
	b = append(b, `{"token":`...)
	b = jsonenc.AppendString(b, token)
	b = append(b, ',')
	b = append(b, Members...)
	return append(b, `,"hasFeatureFlags":true}`...)
}

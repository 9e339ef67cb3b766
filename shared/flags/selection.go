package flags

import "strings"

// Runtime is where a flag may be evaluated (PostHog's evaluation_runtime) and where a request
// comes from. PostHog's /flags service leaves out of an answer the flags meant for another
// runtime than the request's (rust/feature-flags/src/handler/flags.rs); Selected does the same.
type Runtime uint8

// The runtimes. A flag is RuntimeAll, RuntimeClient or RuntimeServer; a request is one of
// them or RuntimeUnknown when it names none and its headers tell none.
const (
	RuntimeUnknown Runtime = iota
	RuntimeAll
	RuntimeClient
	RuntimeServer
)

// ParseRuntime reads an evaluation_runtime as PostHog's server does: "client" or "server" in
// any case, anything else (unknown values included) "all".
func ParseRuntime(s string) Runtime {
	switch {
	case strings.EqualFold(s, "client"):
		return RuntimeClient
	case strings.EqualFold(s, "server"):
		return RuntimeServer
	}
	return RuntimeAll
}

// String is the runtime's evaluation_runtime value ("" for RuntimeUnknown).
func (r Runtime) String() string {
	switch r {
	case RuntimeAll:
		return "all"
	case RuntimeClient:
		return "client"
	case RuntimeServer:
		return "server"
	}
	return ""
}

// The User-Agent prefixes of PostHog's server SDKs and of its mobile SDKs, as its /flags
// service tells them apart.
var (
	browserMarks   = []string{"Mozilla/", "Chrome/", "Safari/", "Firefox/", "Edge/"}
	serverPrefixes = []string{"posthog-python/", "posthog-ruby/", "posthog-php/", "posthog-java/", "posthog-go/",
		"posthog-node/", "posthog-dotnet/", "posthog-elixir/"}
	serverMarks    = []string{"python-requests/", "curl/"}
	mobilePrefixes = []string{"posthog-android/", "posthog-ios/", "posthog-react-native/", "posthog-flutter/"}
)

// DetectRuntime tells a request's runtime from its User-Agent and whether it carries any of
// the headers only browsers send (Origin, Referer, Sec-Fetch-Mode, Sec-Fetch-Site), in the
// order PostHog's server checks them: browser marks in the User-Agent, then server SDKs (and
// curl, python-requests), then mobile SDKs, then the browser headers. RuntimeUnknown when
// none applies.
func DetectRuntime(userAgent string, browserHeaders bool) Runtime {
	if userAgent != "" {
		for _, m := range browserMarks {
			if strings.Contains(userAgent, m) {
				return RuntimeClient
			}
		}
		for _, p := range serverPrefixes {
			if strings.HasPrefix(userAgent, p) {
				return RuntimeServer
			}
		}
		for _, m := range serverMarks {
			if strings.Contains(userAgent, m) {
				return RuntimeServer
			}
		}
		for _, p := range mobilePrefixes {
			if strings.HasPrefix(userAgent, p) {
				return RuntimeClient
			}
		}
	}
	if browserHeaders {
		return RuntimeClient
	}
	return RuntimeUnknown
}

// Filters reports whether some flag of the snapshot is left out of a request from runtime rt
// naming the evaluation contexts: when it is false every flag is selected, and a caller need
// not ask Selected flag by flag.
func (s *Snapshot) Filters(rt Runtime, contexts []string) bool {
	return (rt != RuntimeAll && s.runtimeScoped) || (len(contexts) > 0 && s.tagged)
}

// Selected reports whether flag i (as Lookup and Evaluate number them) goes into the answer
// to a request from runtime rt naming the evaluation contexts (evaluation_contexts, or
// evaluation_environments): a request from every runtime gets every flag; otherwise a flag
// for every runtime goes to all, a flag for one runtime only to requests known to come from
// it. Then, when the request names contexts, a flag with evaluation tags goes only where one
// of them is named. Flags left out are still evaluated for the flags that depend on them.
func (s *Snapshot) Selected(i int, rt Runtime, contexts []string) bool {
	f := &s.flags[i]
	if rt != RuntimeAll && f.runtime != RuntimeAll && f.runtime != rt {
		return false
	}
	if len(contexts) == 0 || len(f.evaluationTags) == 0 {
		return true
	}
	for _, t := range f.evaluationTags {
		for _, c := range contexts {
			if t == c {
				return true
			}
		}
	}
	return false
}

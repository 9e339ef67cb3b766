package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"regexp"
	"strings"
	"testing"
)

// TestEveryFlagHasAnEnvironmentVariable reads --help: each flag's usage must name its
// variable, as operators configure containers through the environment.
func TestEveryFlagHasAnEnvironmentVariable(t *testing.T) {
	var out bytes.Buffer
	if _, err := parseConfig([]string{"--help"}, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	checkHelp(t, out.String(), "FLAGEDGE_EVENT_LOG_URL", "FLAGEDGE_EVENT_LOG_CREDS", "FLAGEDGE_EVENT_LOG_CA", "FLAGEDGE_DRAIN_DELAY", "FLAGEDGE_LOOKUP_TIMEOUT", "FLAGEDGE_SPOOL_QUOTA", "FLAGEDGE_SHUTDOWN_TIMEOUT")
}

func checkHelp(t *testing.T, help string, mustName ...string) {
	t.Helper()
	flags := regexp.MustCompile(`(?m)^  -(\S+)`).FindAllStringSubmatch(help, -1)
	if len(flags) < 5 {
		t.Fatalf("found %d flags in help:\n%s", len(flags), help)
	}
	// A flag's entry runs from its line to the next flag's.
	entries := regexp.MustCompile(`(?m)^  -`).Split(help, -1)[1:]
	for i, e := range entries {
		if !regexp.MustCompile(`\(env [A-Z_]+\)`).MatchString(e) {
			t.Errorf("flag -%s names no environment variable: %q", flags[i][1], e)
		}
	}
	for _, env := range mustName {
		if !bytes.Contains([]byte(help), []byte("(env "+env+")")) {
			t.Errorf("help does not name %s", env)
		}
	}
}

// TestSpoofableLimitsWarning: without --trusted-proxies the edge warns that its per-address
// limits can be escaped by rotating X-Forwarded-For, naming the limits in force.
func TestSpoofableLimitsWarning(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string // substrings; none for no warning
	}{
		{nil, []string{"--ofrep-stream-max-per-ip", "X-Forwarded-For", "--trusted-proxies"}},
		{[]string{"--rate-limit-per-ip", "5"}, []string{"--ofrep-stream-max-per-ip, --rate-limit-per-ip"}},
		{[]string{"--rate-limit-per-ip", "5", "--trusted-proxies", "10.0.0.1/32"}, nil},
	} {
		cfg, err := parseConfig(tc.args, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		msg := cfg.spoofableLimits()
		if len(tc.want) == 0 && msg != "" {
			t.Errorf("%v: warned %q", tc.args, msg)
		}
		for _, w := range tc.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%v: warning %q does not say %q", tc.args, msg, w)
			}
		}
	}
}

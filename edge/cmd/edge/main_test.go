package main

import (
	"bytes"
	"errors"
	"flag"
	"regexp"
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

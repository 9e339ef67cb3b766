package daemon

import (
	"bytes"
	"testing"
	"time"
)

func TestFlagsTakeTheEnvironmentThenArguments(t *testing.T) {
	t.Setenv("TEST_FLAGEDGE_ADDR", "127.0.0.1:1")
	t.Setenv("TEST_FLAGEDGE_DELAY", "3s")
	var out bytes.Buffer
	fs := NewFlags("x", &out)
	var addr, unset string
	var delay time.Duration
	fs.String(&addr, "addr", "TEST_FLAGEDGE_ADDR", "default", "where")
	fs.String(&unset, "other", "TEST_FLAGEDGE_UNSET", "kept", "what")
	fs.Duration(&delay, "delay", "TEST_FLAGEDGE_DELAY", time.Second, "how long")
	if err := fs.Parse([]string{"--delay", "4s"}); err != nil {
		t.Fatal(err)
	}
	if addr != "127.0.0.1:1" || unset != "kept" || delay != 4*time.Second {
		t.Errorf("addr %q, other %q, delay %v", addr, unset, delay)
	}
	fs.Usage()
	for _, want := range []string{"where (env TEST_FLAGEDGE_ADDR)", "how long (env TEST_FLAGEDGE_DELAY)"} {
		if !bytes.Contains(out.Bytes(), []byte(want)) {
			t.Errorf("usage lacks %q:\n%s", want, out.String())
		}
	}
}

func TestFlagsRefuseAMalformedEnvironment(t *testing.T) {
	t.Setenv("TEST_FLAGEDGE_DELAY", "soon")
	fs := NewFlags("x", &bytes.Buffer{})
	var delay time.Duration
	fs.Duration(&delay, "delay", "TEST_FLAGEDGE_DELAY", time.Second, "how long")
	err := fs.Parse(nil)
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("TEST_FLAGEDGE_DELAY")) {
		t.Fatalf("Parse = %v, want an error naming the variable", err)
	}
}

func TestLoggerWritesDurationsAsText(t *testing.T) {
	var out bytes.Buffer
	log, err := NewLogger(&out, "info")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("x", "retry_in", 1500*time.Millisecond)
	if !bytes.Contains(out.Bytes(), []byte(`"retry_in":"1.5s"`)) {
		t.Errorf("log line %s", out.String())
	}
}

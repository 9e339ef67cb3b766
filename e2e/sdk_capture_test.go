package e2e

import (
	"fmt"
	"io"
	"log"
	"strings"
	"testing"

	posthog "github.com/posthog/posthog-go"
)

// checkSDKPersons checks what an SDK's capture, identify, alias and group identify left:
// prefix names the SDK's users and groups.
func checkSDKPersons(t *testing.T, s *stack, prefix string) {
	t.Helper()
	p := s.person(prefix + "-anon")
	if p == nil {
		t.Fatalf("no person for %s-anon", prefix)
	}
	ids := fmt.Sprint(p["distinct_ids"])
	for _, d := range []string{prefix + "-anon", prefix + "-user", prefix + "-alias"} {
		if !strings.Contains(ids, d) {
			t.Errorf("%s: merged person lacks %s: %s", prefix, d, ids)
		}
	}
	if props := p["properties"].(map[string]any); props["plan"] != "pro" || props["email"] != prefix+"@example.com" {
		t.Errorf("%s: person properties %v", prefix, props)
	}
	code, out := call(t, "GET", fmt.Sprintf("http://%s/api/projects/%d/groups/?search=%s-co", s.httpAddr, s.projectID, prefix), s.personal, nil)
	if code != 200 || out["count"] != 1.0 {
		t.Fatalf("%s: groups %v", prefix, out)
	}
	if g := out["results"].([]any)[0].(map[string]any)["group_properties"].(map[string]any); g["name"] != "Acme "+prefix {
		t.Errorf("%s: group properties %v", prefix, g)
	}
	code, out = call(t, "GET", fmt.Sprintf("http://%s/api/projects/%d/events/?event=purchase&distinct_id=%s-user", s.httpAddr, s.projectID, prefix), s.personal, nil)
	if code != 200 || out["count"] != 1.0 {
		t.Fatalf("%s: purchase events %v", prefix, out)
	}
	props := out["results"].([]any)[0].(map[string]any)["properties"].(map[string]any)
	if props["amount"] != 42.0 || fmt.Sprint(props["$groups"]) != fmt.Sprintf("map[company:%s-co]", prefix) {
		t.Errorf("%s: purchase properties %v", prefix, props)
	}
}

// TestPostHogGoCapture sends posthog-go v1.23.1's capture, identify, alias and group
// identify through an edge.
func TestPostHogGoCapture(t *testing.T) {
	s := newStack(t)
	e := s.startEdge("edge", "", true)
	c, err := posthog.NewWithConfig(s.token, posthog.Config{Endpoint: e.url, BatchSize: 3,
		Logger: posthog.StdLogger(log.New(io.Discard, "", 0), false)})
	if err != nil {
		t.Fatal(err)
	}
	for _, msg := range []posthog.Message{
		posthog.Capture{DistinctId: "go-anon", Event: "$pageview", Properties: posthog.NewProperties().Set("$current_url", "https://example.com")},
		posthog.Identify{DistinctId: "go-user", Properties: posthog.NewProperties().Set("plan", "pro").Set("email", "go@example.com")},
		posthog.Alias{DistinctId: "go-user", Alias: "go-alias"},
		posthog.Alias{DistinctId: "go-user", Alias: "go-anon"},
		posthog.GroupIdentify{Type: "company", Key: "go-co", Properties: posthog.NewProperties().Set("name", "Acme go")},
		posthog.Capture{DistinctId: "go-user", Event: "purchase", Properties: posthog.NewProperties().Set("amount", 42), Groups: posthog.NewGroups().Set("company", "go-co")},
	} {
		if err := c.Enqueue(msg); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil { // flushes
		t.Fatal(err)
	}
	s.waitEventCount(6)
	checkSDKPersons(t, s, "go")
}

// TestPostHogNodeCapture does the same with posthog-node (npm), which gzips its batches.
func TestPostHogNodeCapture(t *testing.T) {
	s := newStack(t)
	e := s.startEdge("edge", "", true)
	node(t, `
const { PostHog } = require("posthog-node");
(async () => {
  const c = new PostHog(process.env.TOKEN, { host: process.env.HOST, flushAt: 2, flushInterval: 50 });
  c.capture({ distinctId: "node-anon", event: "$pageview", properties: { $current_url: "https://example.com" } });
  c.identify({ distinctId: "node-user", properties: { plan: "pro", email: "node@example.com" } });
  c.alias({ distinctId: "node-user", alias: "node-alias" });
  c.alias({ distinctId: "node-user", alias: "node-anon" });
  c.groupIdentify({ groupType: "company", groupKey: "node-co", properties: { name: "Acme node" } });
  c.capture({ distinctId: "node-user", event: "purchase", properties: { amount: 42 }, groups: { company: "node-co" } });
  await c.shutdown();
})().catch((e) => { console.error(e); process.exit(1); });
`, "TOKEN="+s.token, "HOST="+e.url)
	s.waitEventCount(6)
	checkSDKPersons(t, s, "node")
}

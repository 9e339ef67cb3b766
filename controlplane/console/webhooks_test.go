package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/postgres"
)

func TestConsoleWebhooks(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	b := s.browser()
	tok := b.login("admin@example.com", s.password)
	base := fmt.Sprintf("/project/%d/webhooks", s.project)

	if p := b.get(base); p.status != 200 || !strings.Contains(p.body, "No webhooks yet") || !strings.Contains(p.body, `value="scheduled_change.failed"`) {
		t.Fatalf("webhooks page: %d %.2000s", p.status, p.body)
	}
	form := func(u string, events ...string) url.Values {
		return url.Values{"csrf_token": {tok}, "url": {u}, "secret": {"console-secret-0123"}, "events": events}
	}
	if p := b.post(base, form("http://127.0.0.1:9000/hook", "feature_flag.created")); p.status != http.StatusBadRequest || !strings.Contains(p.body, "only public addresses") {
		t.Errorf("a loopback hook: %d %.300s", p.status, p.body)
	}
	if p := b.post(base, form("https://93.184.215.14/hook")); p.status != http.StatusBadRequest || !strings.Contains(p.body, "Name at least one event kind") {
		t.Errorf("a hook without events: %d", p.status)
	}
	if p := b.post(base, form("https://93.184.215.14/hook", "feature_flag.created", "annotation.created")); p.status != http.StatusSeeOther {
		t.Fatalf("create: %d %.300s", p.status, p.body)
	}
	list := b.get(base)
	if !strings.Contains(list.body, "https://93.184.215.14/hook") || strings.Contains(list.body, "console-secret") {
		t.Fatalf("list: %.2000s", list.body)
	}
	admin, err := postgres.NewServices(s.db, 4).Auth.AuthenticatePersonalKey(context.Background(), s.adminKey)
	if err != nil {
		t.Fatal(err)
	}
	hooks, _, err := postgres.NewWebhookService(s.db).FindWebhooks(controlplane.NewContextWithUser(context.Background(), &admin.User), s.project, 10, 0)
	if err != nil || len(hooks) != 1 {
		t.Fatalf("hooks %v %v", hooks, err)
	}
	// A flag creation enqueues a delivery (no dispatcher runs here): the log shows it pending.
	key := "console-hooked"
	if _, err := postgres.NewServices(s.db, 4).Flags.CreateFlag(controlplane.NewContextWithUser(context.Background(), &admin.User), s.project, controlplane.FlagUpdate{Key: &key}); err != nil {
		t.Fatal(err)
	}
	hookPath := fmt.Sprintf("%s/%d", base, hooks[0].ID)
	if p := b.get(hookPath); p.status != 200 || !strings.Contains(p.body, "feature_flag.created") || !strings.Contains(p.body, ">pending<") {
		t.Errorf("delivery log: %d %.3000s", p.status, p.body)
	}
	// A member of the organisation who is not an admin is refused, and the hook stays.
	m, mtok, _ := s.member(t, "member@example.com")
	if p := m.get(base); p.status != http.StatusForbidden {
		t.Errorf("a member's webhooks page: %d", p.status)
	}
	if p := m.get(hookPath); p.status != http.StatusForbidden {
		t.Errorf("a member's delivery log: %d", p.status)
	}
	if p := m.post(hookPath+"/delete", url.Values{"csrf_token": {mtok}}); p.status != http.StatusForbidden {
		t.Errorf("a member's deletion: %d", p.status)
	}
	if p := b.get(hookPath); p.status != 200 {
		t.Fatalf("the hook is gone after a member's refused deletion: %d", p.status)
	}

	if p := b.post(hookPath+"/delete", url.Values{"csrf_token": {tok}}); p.status != http.StatusSeeOther {
		t.Fatalf("delete: %d", p.status)
	}
	if p := b.get(base); !strings.Contains(p.body, "No webhooks yet") {
		t.Error("the hook is still listed after its deletion")
	}
	// A deleted or malformed hook is not found; a project out of reach is refused.
	for path, want := range map[string]int{
		hookPath + "/delete":   http.StatusNotFound,
		base + "/first/delete": http.StatusNotFound,
		fmt.Sprintf("/project/%d/webhooks/%d/delete", s.project+1000, hooks[0].ID): http.StatusForbidden,
	} {
		if p := b.post(path, url.Values{"csrf_token": {tok}}); p.status != want {
			t.Errorf("POST %s: %d, want %d", path, p.status, want)
		}
	}
}

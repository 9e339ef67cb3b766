package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

func TestConsoleEventDestinations(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	b := s.browser()
	tok := b.login("admin@example.com", s.password)
	base := fmt.Sprintf("/project/%d/destinations", s.project)

	if p := b.get(base); p.status != 200 || !strings.Contains(p.body, "No event destinations yet") {
		t.Fatalf("destinations page: %d %.2000s", p.status, p.body)
	}
	form := func(u, key string) url.Values { return url.Values{"csrf_token": {tok}, "url": {u}, "api_key": {key}} }
	if p := b.post(base, form("http://127.0.0.1:8000", "phc_consolekey12345")); p.status != http.StatusBadRequest || !strings.Contains(p.body, "only public addresses") {
		t.Errorf("a loopback destination: %d %.300s", p.status, p.body)
	}
	if p := b.post(base, form("https://93.184.215.14", "")); p.status != http.StatusBadRequest || !strings.Contains(p.body, "The key must be text") {
		t.Errorf("a destination without a key: %d %.300s", p.status, p.body)
	}
	if p := b.post(base, form("https://93.184.215.14", "phc_consolekey12345")); p.status != http.StatusSeeOther {
		t.Fatalf("create: %d %.300s", p.status, p.body)
	}
	list := b.get(base)
	if !strings.Contains(list.body, "https://93.184.215.14") || !strings.Contains(list.body, "phc_…2345") || strings.Contains(list.body, "consolekey") ||
		!strings.Contains(list.body, ">enabled<") {
		t.Fatalf("list: %.3000s", list.body)
	}
	var id int64
	if err := s.db.Pool.QueryRow(context.Background(), `SELECT id FROM event_destinations`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	one := fmt.Sprintf("%s/%d", base, id)
	if p := b.post(one+"/enabled", url.Values{"csrf_token": {tok}, "enabled": {"false"}}); p.status != http.StatusSeeOther {
		t.Fatalf("disable: %d", p.status)
	}
	if p := b.get(base); !strings.Contains(p.body, ">disabled<") {
		t.Errorf("not shown disabled: %.3000s", p.body)
	}
	// A destination paused by a refused key shows why, and enabling resumes it.
	if _, err := s.db.Pool.Exec(context.Background(), `UPDATE event_destinations SET enabled = true, paused_reason = 'HTTP 401: bad key'`); err != nil {
		t.Fatal(err)
	}
	if p := b.get(base); !strings.Contains(p.body, ">paused<") || !strings.Contains(p.body, "HTTP 401: bad key") || !strings.Contains(p.body, ">Resume<") {
		t.Errorf("not shown paused: %.3000s", p.body)
	}
	if p := b.post(one+"/enabled", url.Values{"csrf_token": {tok}, "enabled": {"true"}}); p.status != http.StatusSeeOther {
		t.Fatalf("resume: %d", p.status)
	}
	if p := b.get(base); !strings.Contains(p.body, ">enabled<") || strings.Contains(p.body, "bad key") {
		t.Errorf("not resumed: %.3000s", p.body)
	}
	// A member of the organisation who is not an admin is refused, and the destination stays
	// as it was.
	m, mtok, _ := s.member(t, "member@example.com")
	if p := m.get(base); p.status != http.StatusForbidden {
		t.Errorf("a member's destinations page: %d", p.status)
	}
	for _, path := range []string{one + "/enabled", one + "/delete"} {
		if p := m.post(path, url.Values{"csrf_token": {mtok}, "enabled": {"false"}}); p.status != http.StatusForbidden {
			t.Errorf("a member's POST %s: %d", path, p.status)
		}
	}
	if p := b.get(base); !strings.Contains(p.body, ">enabled<") {
		t.Errorf("a member's refused requests changed the destination: %.3000s", p.body)
	}

	if p := b.post(one+"/delete", url.Values{"csrf_token": {tok}}); p.status != http.StatusSeeOther {
		t.Fatalf("delete: %d", p.status)
	}
	if p := b.get(base); !strings.Contains(p.body, "No event destinations yet") {
		t.Error("the destination is still listed after its deletion")
	}
	// A deleted or malformed destination is not found; a project out of reach is refused.
	for path, want := range map[string]int{
		one + "/enabled":      http.StatusNotFound,
		one + "/delete":       http.StatusNotFound,
		base + "/0/delete":    http.StatusNotFound,
		base + "/one/enabled": http.StatusNotFound,
		fmt.Sprintf("/project/%d/destinations/%d/delete", s.project+1000, id): http.StatusForbidden,
	} {
		if p := b.post(path, url.Values{"csrf_token": {tok}, "enabled": {"true"}}); p.status != want {
			t.Errorf("POST %s: %d, want %d", path, p.status, want)
		}
	}
}

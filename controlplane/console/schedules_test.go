package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/flagedge/flagedge/controlplane/scheduler/schedulertest"
)

var cancelPattern = regexp.MustCompile(`action="(/project/\d+/feature_flags/\d+/schedule/\d+/delete)"`)

// TestConsoleScheduledChanges schedules changes on a flag's page: a pending one is listed
// and cancelled, one due at once runs and shows as executed, one whose flag went away shows
// its failure; bad input is told. (TestConsoleRoleAccess: no form without edit access.)
func TestConsoleScheduledChanges(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	sched := schedulertest.Start(t, s.db)
	admin := s.browser()
	tok := admin.login("admin@example.com", s.password)
	base := fmt.Sprintf("/project/%d/feature_flags", s.project)
	p := admin.post(base+"/new", url.Values{"csrf_token": {tok}, "key": {"timed"}, "active": {"on"}, "cond_count": {"1"}, "action": {"save"}})
	flagPath, _, _ := strings.Cut(p.location, "?")
	if page := admin.get(flagPath); !strings.Contains(page.body, "No scheduled changes.") || !strings.Contains(page.body, `id="schedule-form"`) {
		t.Fatalf("the flag page has no schedule panel: %.2000s", page.body)
	}
	schedule := func(form url.Values) page {
		t.Helper()
		form.Set("csrf_token", tok)
		p := admin.post(flagPath+"/schedule", form)
		if p.status != http.StatusSeeOther {
			t.Fatalf("schedule %v: %d %.300s", form, p.status, p.body)
		}
		sched.Wake() // as the NOTIFY of the creation does
		return admin.get(flagPath)
	}

	later := time.Now().UTC().Add(time.Hour).Format("2006-01-02T15:04")
	page := schedule(url.Values{"operation": {"disable"}, "scheduled_at": {later}})
	if !strings.Contains(page.body, "Disable the flag") || !strings.Contains(page.body, `badge-yellow">Pending`) {
		t.Fatalf("the pending change is not listed: %.3000s", page.body)
	}
	m := cancelPattern.FindStringSubmatch(page.body)
	if m == nil {
		t.Fatalf("no cancel button: %.3000s", page.body)
	}
	cancel := m[1]
	if p := admin.post(cancel, url.Values{"csrf_token": {tok}}); p.status != http.StatusSeeOther {
		t.Fatalf("cancel %s: %d", cancel, p.status)
	}
	if page := admin.get(flagPath); !strings.Contains(page.body, "No scheduled changes.") || !strings.Contains(page.body, "Scheduled change cancelled.") {
		t.Fatalf("the cancelled change is still listed: %.3000s", page.body)
	}

	now := time.Now().UTC().Format("2006-01-02T15:04:05")
	schedule(url.Values{"operation": {"condition"}, "rollout_percentage": {"25"}, "scheduled_at": {now}})
	// How soon a due change runs is the scheduler's own test; here it need only run.
	deadline := time.Now().Add(30 * time.Second)
	for page = admin.get(flagPath); !strings.Contains(page.body, `badge-green">Executed`); page = admin.get(flagPath) {
		if time.Now().After(deadline) {
			t.Fatalf("the due change did not run: %.4000s", page.body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(page.body, "Add a release condition: 25% of everyone") {
		t.Errorf("the executed change is not described: %.4000s", page.body)
	}

	for _, tc := range []struct {
		form url.Values
		says string
	}{
		{url.Values{"operation": {"enable"}, "scheduled_at": {"tomorrow"}}, "Give a date and time (UTC)."},
		{url.Values{"operation": {"condition"}, "rollout_percentage": {"150"}, "scheduled_at": {later}}, "Give a rollout between 0 and 100."},
		{url.Values{"operation": {"condition"}, "rollout_percentage": {"NaN"}, "scheduled_at": {later}}, "Give a rollout between 0 and 100."},
		{url.Values{"operation": {"explode"}, "scheduled_at": {later}}, "Choose a change."},
	} {
		if page := schedule(tc.form); !strings.Contains(page.body, tc.says) || strings.Contains(page.body, `badge-yellow">Pending`) {
			t.Errorf("%v: the page does not say %q, or scheduled it", tc.form, tc.says)
		}
	}

	// A change whose flag is deleted before it runs fails, and says why.
	schedule(url.Values{"operation": {"enable"}, "scheduled_at": {later}})
	if p := admin.post(flagPath+"/delete", url.Values{"csrf_token": {tok}}); p.status != http.StatusSeeOther {
		t.Fatalf("delete the flag: %d", p.status)
	}
	if _, err := s.db.Pool.Exec(context.Background(), `UPDATE scheduled_changes SET scheduled_at = now() WHERE executed_at IS NULL`); err != nil {
		t.Fatal(err)
	}
	sched.Wake()
	for page = admin.get(flagPath); !strings.Contains(page.body, `badge-red">Failed`); page = admin.get(flagPath) {
		if time.Now().After(deadline.Add(30 * time.Second)) {
			t.Fatalf("the change of a deleted flag did not fail: %.4000s", page.body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(page.body, "was deleted.") || strings.Contains(page.body, `id="schedule-form"`) {
		t.Errorf("the failure is not shown, or a deleted flag offers scheduling: %.4000s", page.body)
	}
}

package e2e

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
)

// batchReceiver is a PostHog capture host on 127.0.0.1: its /batch/ takes gzip batches and
// counts their events while its answer is 200, and otherwise answers the status it is set to.
type batchReceiver struct {
	url    string
	answer atomic.Int32
	events atomic.Int64
}

func newBatchReceiver(t *testing.T) *batchReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &batchReceiver{url: "http://" + ln.Addr().String()}
	r.answer.Store(http.StatusOK)
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/batch/" {
			http.NotFound(w, req)
			return
		}
		if code := int(r.answer.Load()); code != http.StatusOK {
			http.Error(w, fmt.Sprintf(`{"status": %d}`, code), code)
			return
		}
		n, err := countBatch(req)
		if err != nil {
			t.Errorf("the receiver got a batch that is not gzip JSON of PostHog's shape: %v", err)
			http.Error(w, `{"status": 400}`, http.StatusBadRequest)
			return
		}
		r.events.Add(int64(n))
		w.Write([]byte(`{"status": 1}`)) //nolint:errcheck // the client's problem
	})}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	t.Cleanup(func() { srv.Close() })
	return r
}

// captureBatch sends n events named name to the edge and waits until the control plane stores them
// (and so has queued them for the destinations enabled then).
func (s *stack) captureBatch(e *edge, name string, n int) {
	s.t.Helper()
	before := s.eventCount(name)
	batch := make([]any, n)
	for i := range batch {
		batch[i] = map[string]any{"event": name, "distinct_id": fmt.Sprintf("visitor-%d", i), "uuid": uuid.NewString()}
	}
	if code, out := call(s.t, "POST", e.url+"/batch/", "", map[string]any{"api_key": s.token, "batch": batch}); code != 200 {
		s.t.Fatalf("capture: %d %v", code, out)
	}
	waitFor(s.t, name+" stored", func() bool { return s.eventCount(name) >= before+n })
}

// destinationRow reads the destinations table's row of the destination url as a person reads
// it: each cell's text by its column's heading (null when the row is not there).
func destinationRow(url string) chromedp.Action[map[string]string] {
	return chromedp.Evaluate[map[string]string](fmt.Sprintf(`(() => {
		const t = document.querySelector('table');
		if (!t) return null;
		const heads = [...t.tHead.rows[0].cells].map(c => c.textContent.trim());
		const row = [...t.tBodies[0].rows].find(r => r.cells[0].textContent.trim() === %q);
		if (!row) return null;
		return Object.fromEntries(heads.map((h, i) => [h || 'Actions', row.cells[i].textContent.trim().replace(/\s+/g, ' ')]));
	})()`, url))
}

// TestDestinationsInBrowser drives the event destinations page in headless Chromium against
// the real binaries, an edge and a receiver on 127.0.0.1: an admin adds a destination and sees
// it listed with its key hidden, sees the events captured at the edge sent, disables it (events
// captured meanwhile are not queued for it) and enables it, sees it retrying, how far behind it
// is and its last error while the receiver fails, sees it paused when its key is refused and resumes it,
// and deletes it; a member of the organisation is not offered the page, is refused it, and
// cannot change the destination with a form of their own.
func TestDestinationsInBrowser(t *testing.T) {
	s := newStack(t, "--forward-allow-private", "--forward-poll", "50ms", "--forward-retry-base", "100ms", "--forward-retry-max", "500ms")
	e := s.startEdge("edge-destinations", "", true)
	rcv := newBatchReceiver(t)
	base := "http://" + s.httpAddr
	const adminPassword, memberPassword = "correct horse battery", "member horse battery"
	const key = "phc_destination_secret_4321"
	s.setPassword("ops@example.com", adminPassword)
	_, _ = s.member("dev@example.com")
	s.setPassword("dev@example.com", memberPassword)
	page := fmt.Sprintf("%s/project/%d/destinations", base, s.projectID)
	login := func(email, password string) step {
		return chromedp.Steps(chromedp.Navigate(base+"/login"), chromedp.WaitVisible(labelled("Email")),
			fill("Email", email), fill("Password", password), chromedp.Click(button("Log in")), chromedp.WaitVisible(link("Feature flags")))
	}
	row := fmt.Sprintf(`//tr[td[1][normalize-space()=%q]]`, rcv.url)
	flash := func(text string) string { return fmt.Sprintf(`//*[@role="status" and contains(., %q)]`, text) }
	ctx := newBrowser(t)
	// reloadUntil reloads the page until the destination's row satisfies ok.
	reloadUntil := func(what string, ok func(map[string]string) bool) map[string]string {
		t.Helper()
		var got map[string]string
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			run(t, ctx, "reload", chromedp.Reload(), chromedp.WaitVisible(`//h1[normalize-space()="Event destinations"]`))
			if got = value(t, ctx, "the destination's row", destinationRow(rcv.url)); got != nil && ok(got) {
				return got
			}
		}
		t.Fatalf("%s: the row still reads %v", what, got)
		return nil
	}

	run(t, ctx, "the admin opens the page from the menu", chromedp.EmulateViewport(1440, 900),
		login("ops@example.com", adminPassword),
		chromedp.Click(link("Event destinations")),
		chromedp.WaitVisible(`//h2[normalize-space()="No event destinations yet"]`))
	run(t, ctx, "add a destination",
		fill("PostHog capture host (events go to its /batch/)", rcv.url),
		fill("Project API key of the receiving PostHog project (not shown again)", key),
		chromedp.Click(button("Add destination")),
		chromedp.WaitVisible(flash("Event destination added")),
		chromedp.WaitVisible(row))
	got := value(t, ctx, "the destination's row", destinationRow(rcv.url))
	if got["Key"] != "phc_…4321" || got["State"] != "enabled" || got["Queued"] != "0" || got["Sent"] != "0" || got["Last error"] != "" {
		t.Errorf("the new destination reads %v", got)
	}
	if html := value(t, ctx, "the page", chromedp.OuterHTML("html")); strings.Contains(html, "destination_secret") {
		t.Error("the page shows the destination's key")
	}

	// Captured events are sent, and the page says so.
	s.captureBatch(e, "console-forwarded", 5)
	reloadUntil("the events sent", func(r map[string]string) bool {
		return r["Queued"] == "0" && strings.HasPrefix(r["Sent"], "5 (last ")
	})
	if n := rcv.events.Load(); n != 5 {
		t.Errorf("the receiver got %d events, want 5", n)
	}

	// Disabled, it is not sent the events captured meanwhile; enabled again, it is sent the
	// next ones.
	run(t, ctx, "disable", chromedp.Click(row+button("Disable")), chromedp.WaitVisible(flash("Event destination disabled")),
		chromedp.WaitVisible(row+button("Enable")))
	if got := value(t, ctx, "the destination's row", destinationRow(rcv.url)); got["State"] != "disabled" {
		t.Errorf("the disabled destination reads %v", got)
	}
	s.captureBatch(e, "console-forwarded", 3)
	if got := reloadUntil("the disabled destination", func(map[string]string) bool { return true }); got["Queued"] != "0" {
		t.Errorf("events were queued for a disabled destination: %v", got)
	}
	run(t, ctx, "enable", chromedp.Click(row+button("Enable")), chromedp.WaitVisible(flash("Event destination enabled")),
		chromedp.WaitVisible(row+button("Disable")))

	// While the receiver fails, the page shows what waits, how far behind it is, and why.
	rcv.answer.Store(http.StatusServiceUnavailable)
	s.captureBatch(e, "console-forwarded", 2)
	reloadUntil("the lag and the last error", func(r map[string]string) bool {
		return strings.HasPrefix(r["Queued"], "2 (") && strings.HasSuffix(r["Queued"], " s behind)") && r["Last error"] == "HTTP 503" &&
			r["State"] == "retrying"
	})
	shoot(t, ctx, "event-destinations")
	// A refused key pauses it until it is changed or resumed; resumed, it catches up.
	rcv.answer.Store(http.StatusUnauthorized)
	reloadUntil("paused", func(r map[string]string) bool {
		return r["State"] == "paused" && strings.HasPrefix(r["Last error"], "Paused until changed: HTTP 401")
	})
	rcv.answer.Store(http.StatusOK)
	run(t, ctx, "resume", chromedp.Click(row+button("Resume")), chromedp.WaitVisible(flash("Event destination enabled")))
	reloadUntil("caught up", func(r map[string]string) bool {
		return r["State"] == "enabled" && r["Queued"] == "0" && strings.HasPrefix(r["Sent"], "7 (last ") && r["Last error"] == ""
	})
	if n := rcv.events.Load(); n != 7 {
		t.Errorf("the receiver got %d events, want the 5 and 2 sent while enabled", n)
	}

	// A member is not offered the page, is refused it, and cannot change the destination
	// with a form of their own.
	run(t, ctx, "the member logs in", chromedp.Click(button("Log out")), chromedp.WaitVisible(labelled("Email")),
		login("dev@example.com", memberPassword))
	if n := value(t, ctx, "the menu", chromedp.Evaluate[int](`document.querySelectorAll('nav a[href$="/destinations"]').length`)); n != 0 {
		t.Error("the menu offers event destinations to a member")
	}
	run(t, ctx, "the member opens the page", chromedp.Navigate(page), chromedp.WaitVisible(`//h1[normalize-space()="Permission denied"]`))
	if html := value(t, ctx, "the page", chromedp.OuterHTML("html")); strings.Contains(html, rcv.url) {
		t.Error("a member is shown the destination")
	}
	var id int64
	if err := openDB(t, s.dbURL).QueryRow(t.Context(), `SELECT id FROM event_destinations`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	for _, action := range []string{"enabled", "delete"} {
		status := value(t, ctx, "the member's "+action, chromedp.Evaluate[int](fmt.Sprintf(`(async () => {
			const csrf = document.querySelector('input[name=csrf_token]').value;
			const r = await fetch(%q, {method: 'POST', body: new URLSearchParams({csrf_token: csrf, enabled: 'false'}), redirect: 'manual'});
			return r.status; })()`, fmt.Sprintf("%s/%d/%s", page, id, action)), chromedp.EvalAwaitPromise))
		if status != http.StatusForbidden {
			t.Errorf("a member's %s of the destination: %d, want 403", action, status)
		}
	}

	// The admin deletes it.
	run(t, ctx, "the admin deletes it", chromedp.Click(button("Log out")), chromedp.WaitVisible(labelled("Email")),
		login("ops@example.com", adminPassword), chromedp.Navigate(page), chromedp.WaitVisible(row),
		acceptConfirms, chromedp.Click(row+button("Delete")),
		chromedp.WaitVisible(flash("Event destination deleted")),
		chromedp.WaitVisible(`//h2[normalize-space()="No event destinations yet"]`))
	if code, out := call(t, "GET", fmt.Sprintf("%s/api/projects/%d/event_destinations/", base, s.projectID), s.personal, nil); code != 200 || out["count"] != float64(0) {
		t.Errorf("the API lists %d %v after the deletion", code, out)
	}
}

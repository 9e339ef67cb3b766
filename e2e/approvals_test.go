package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/flagedge/flagedge/geoip/geoiptest"
	"github.com/flagedge/flagedge/internal/pgtest"
	"github.com/flagedge/flagedge/internal/tlstest"
)

// member invites a member through the API and gives them a personal key, written straight
// into the database as the API stores one (its SHA-256): the API issues keys only to their
// owner, who would have to log in to the console first. It returns the key and the user's id.
func (s *stack) member(email string) (key string, id int64) {
	s.t.Helper()
	code, out := call(s.t, "POST", "http://"+s.httpAddr+"/api/organizations/@current/invites/", s.personal,
		map[string]any{"target_email": email, "level": 1})
	if code != 201 {
		s.t.Fatalf("invite %s: %d %v", email, code, out)
	}
	key = "phx_e2e_" + email
	db := openDB(s.t, s.dbURL)
	err := db.QueryRow(context.Background(), `INSERT INTO personal_api_keys (user_id, label, secure_value, mask_value, scopes)
		SELECT id, 'e2e', sha256(convert_to($2, 'UTF8')), 'phx_...e2e', '{*}' FROM users WHERE email = $1 RETURNING user_id`,
		email, key).Scan(&id)
	if err != nil {
		s.t.Fatal(err)
	}
	return key, id
}

// TestApprovalsAcrossReplicas runs two control-plane replicas and two edges, one on each: a
// PATCH that a policy gates answers 409 and changes nothing at the edges; self-approval, a
// non-approver, a second vote and a reject without reason are refused with PostHog's answers;
// at quorum (two approvals, one on each replica) the change is applied, every edge serves it
// and the request shows live: true with the version it made. A request whose flag changed
// under it goes stale and fails "Precondition failed" when approved; an overdue one expires.
func TestApprovalsAcrossReplicas(t *testing.T) {
	tls := tlstest.MustWrite(t)
	s := &stack{t: t, dbURL: pgtest.NewDatabase(t), geoipDB: geoiptest.MustWrite(t)}
	s.bootstrap()
	_, aHTTP, aGRPC := s.startReplica("replica-a", tls)
	_, bHTTP, bGRPC := s.startReplica("replica-b", tls)
	s.httpAddr = aHTTP
	flag := s.createFlag(map[string]any{"key": "checkout", "filters": map[string]any{
		"groups": []any{map[string]any{"rollout_percentage": 100}}, "payloads": map[string]any{"true": "1"}}})
	ca := []string{"--control-plane-ca", tls.CA}
	edges := []*edge{
		s.startEdge("edge-a", "", true, append([]string{"--control-plane", aGRPC + "," + bGRPC}, ca...)...),
		s.startEdge("edge-b", "", true, append([]string{"--control-plane", bGRPC + "," + aGRPC}, ca...)...),
	}
	for _, e := range edges {
		waitFor(t, e.name+" serving the flag", func() bool { return payloadAt(e, s.token, "checkout") == "1" })
	}

	requester, _ := s.member("requester@example.com")
	alice, aliceID := s.member("alice@example.com")
	bob, bobID := s.member("bob@example.com")
	outsider, _ := s.member("outsider@example.com")
	api := func(replica, method, path, key string, body any) (int, map[string]any) {
		t.Helper()
		return call(t, method, fmt.Sprintf("http://%s/api/projects/%d%s", replica, s.projectID, path), key, body)
	}
	code, policy := api(aHTTP, "POST", "/approval_policies/", s.personal, map[string]any{"action_key": "feature_flag.update",
		"approver_config": map[string]any{"users": []int64{aliceID, bobID}, "quorum": 2}})
	if code != 201 {
		t.Fatalf("create policy: %d %v", code, policy)
	}

	// The gated PATCH: 409 with PostHog's body, and nothing changes at the edges.
	rollout := func(payload string, pct int) map[string]any {
		return map[string]any{"filters": map[string]any{"groups": []any{map[string]any{"rollout_percentage": pct}},
			"payloads": map[string]any{"true": payload}}}
	}
	code, gated := api(aHTTP, "PATCH", fmt.Sprintf("/feature_flags/%d/", flag), requester, rollout("2", 50))
	if code != 409 || gated["code"] != "approval_required" || gated["change_request_id"] == nil {
		t.Fatalf("gated PATCH: %d %v", code, gated)
	}
	approvers, _ := gated["required_approvers"].(map[string]any)
	if approvers["quorum"] != float64(2) {
		t.Errorf("required_approvers %v", gated["required_approvers"])
	}
	cr := gated["change_request_id"].(string)
	if code, dup := api(bHTTP, "PATCH", fmt.Sprintf("/feature_flags/%d/", flag), requester, rollout("2", 50)); code != 409 ||
		dup["code"] != "change_request_pending" || dup["change_request_id"] != cr {
		t.Errorf("duplicate: %d %v", code, dup)
	}
	for _, e := range edges {
		if got := payloadAt(e, s.token, "checkout"); got != "1" {
			t.Errorf("%s serves %q while the change waits for approval", e.name, got)
		}
	}

	// Refusals, with PostHog's messages.
	refused := func(key, action string, body any, status int, detail string) {
		t.Helper()
		code, out := api(bHTTP, "POST", "/change_requests/"+cr+"/"+action+"/", key, body)
		if code != status || out["detail"] != detail {
			t.Errorf("%s: %d %v, want %d %q", action, code, out, status, detail)
		}
	}
	refused(requester, "approve", nil, 403, "You cannot approve your own change request")
	refused(outsider, "approve", nil, 403, "You are not in the approver set for this change request")
	refused(s.personal, "approve", nil, 403, "You are not in the approver set for this change request")
	refused(alice, "reject", map[string]any{}, 400, "A reason is required for rejection.")
	refused(alice, "cancel", nil, 403, "You cannot cancel this change request")

	// First approval on one replica, the second on the other: applied at quorum.
	code, first := api(aHTTP, "POST", "/change_requests/"+cr+"/approve/", alice, map[string]any{"reason": "looks right"})
	if code != 200 || first["status"] != "approved" || first["message"] != "Approval recorded. 1/2 approvals received." {
		t.Fatalf("first approval: %d %v", code, first)
	}
	refused(alice, "approve", nil, 400, "You have already voted on this change request.")
	for _, e := range edges {
		if got := payloadAt(e, s.token, "checkout"); got != "1" {
			t.Errorf("%s serves %q before quorum", e.name, got)
		}
	}
	code, applied := api(bHTTP, "POST", "/change_requests/"+cr+"/approve/", bob, nil)
	if code != 200 || applied["status"] != "applied" {
		t.Fatalf("second approval: %d %v", code, applied)
	}
	for _, e := range edges {
		waitFor(t, e.name+" serving the approved change", func() bool { return payloadAt(e, s.token, "checkout") == "2" })
	}
	var detail map[string]any
	waitFor(t, "the request live on every edge", func() bool {
		_, detail = api(aHTTP, "GET", "/change_requests/"+cr+"/", s.personal, nil)
		return detail["live"] == true
	})
	if detail["state"] != "applied" || detail["snapshot_version"] == nil || detail["live_edges"] != float64(2) || detail["total_edges"] != float64(2) {
		t.Errorf("applied request: %v", detail)
	}
	refused(bob, "approve", nil, 403, "Only pending change requests can be approved")

	// A request whose flag changes under it goes stale, and approving it fails it.
	code, gated = api(aHTTP, "PATCH", fmt.Sprintf("/feature_flags/%d/", flag), requester, rollout("3", 10))
	if code != 409 {
		t.Fatalf("second gated PATCH: %d %v", code, gated)
	}
	cr = gated["change_request_id"].(string)
	s.patchFlag(flag, map[string]any{"name": "renamed under the request"})
	if _, got := api(bHTTP, "GET", "/change_requests/"+cr+"/", requester, nil); got["validation_status"] != "stale" || got["can_cancel"] != true {
		t.Errorf("after the flag changed: %v", got)
	}
	api(aHTTP, "POST", "/change_requests/"+cr+"/approve/", alice, nil)
	code, failed := api(bHTTP, "POST", "/change_requests/"+cr+"/approve/", bob, nil)
	request, _ := failed["change_request"].(map[string]any)
	if code != 200 || failed["status"] != "failed" || request["state"] != "failed" ||
		!startsWith(request["apply_error"], "Precondition failed") {
		t.Errorf("approving a stale request: %d %v", code, failed)
	}
	if got := payloadAt(edges[0], s.token, "checkout"); got != "2" {
		t.Errorf("a failed request changed what the edge serves: %q", got)
	}

	// An overdue request expires, and can no longer be approved.
	code, gated = api(aHTTP, "PATCH", fmt.Sprintf("/feature_flags/%d/", flag), requester, rollout("4", 20))
	if code != 409 {
		t.Fatalf("third gated PATCH: %d %v", code, gated)
	}
	cr = gated["change_request_id"].(string)
	if _, err := openDB(t, s.dbURL).Exec(context.Background(), `UPDATE change_requests SET expires_at = now() - interval '1 second' WHERE id = $1`, cr); err != nil {
		t.Fatal(err)
	}
	refused(alice, "approve", nil, 403, "Only pending change requests can be approved")
	if _, got := api(aHTTP, "GET", "/change_requests/"+cr+"/", alice, nil); got["state"] != "expired" || got["validation_status"] != "expired" {
		t.Errorf("overdue request: %v", got)
	}
}

func startsWith(v any, prefix string) bool {
	s, ok := v.(string)
	return ok && len(s) >= len(prefix) && s[:len(prefix)] == prefix
}

// TestApprovalWebhooksAcrossReplicas subscribes a real receiver to the change request events
// with two replicas and an edge on each: a gated PATCH and its approval deliver requested,
// approved and applied once each, and change_request.live once — after every edge serves
// the version the request made — however many replicas watch.
func TestApprovalWebhooksAcrossReplicas(t *testing.T) {
	tls := tlstest.MustWrite(t)
	s := &stack{t: t, dbURL: pgtest.NewDatabase(t), geoipDB: geoiptest.MustWrite(t)}
	s.bootstrap()
	private := []string{"--webhook-allow-private", "--webhook-retry-base", "100ms", "--webhook-retry-max", "400ms"}
	_, aHTTP, aGRPC := s.startReplica("replica-a", tls, private...)
	_, bHTTP, bGRPC := s.startReplica("replica-b", tls, private...)
	s.httpAddr = aHTTP
	flag := s.createFlag(map[string]any{"key": "hooked", "active": false})
	ca := []string{"--control-plane-ca", tls.CA}
	edges := []*edge{
		s.startEdge("edge-a", "", true, append([]string{"--control-plane", aGRPC + "," + bGRPC}, ca...)...),
		s.startEdge("edge-b", "", true, append([]string{"--control-plane", bGRPC + "," + aGRPC}, ca...)...),
	}
	receiver := newHookReceiver(t, 200)
	api := func(replica, method, path, key string, body any) (int, map[string]any) {
		t.Helper()
		return call(t, method, fmt.Sprintf("http://%s/api/projects/%d%s", replica, s.projectID, path), key, body)
	}
	if code, out := api(aHTTP, "POST", "/webhooks/", s.personal, map[string]any{"url": receiver.URL, "secret": "0123456789abcdef",
		"events": []string{"change_request.requested", "change_request.approved", "change_request.rejected",
			"change_request.applied", "change_request.live"}}); code != 201 {
		t.Fatalf("create webhook: %d %v", code, out)
	}
	requester, _ := s.member("requester@example.com")
	_, approverID := s.member("alice@example.com")
	alice := "phx_e2e_alice@example.com"
	if code, out := api(aHTTP, "POST", "/approval_policies/", s.personal, map[string]any{"action_key": "feature_flag.enable",
		"approver_config": map[string]any{"users": []int64{approverID}, "quorum": 1}}); code != 201 {
		t.Fatalf("create policy: %d %v", code, out)
	}
	code, gated := api(aHTTP, "PATCH", fmt.Sprintf("/feature_flags/%d/", flag), requester, map[string]any{"active": true})
	if code != 409 {
		t.Fatalf("gated PATCH: %d %v", code, gated)
	}
	cr := gated["change_request_id"].(string)
	if code, out := api(bHTTP, "POST", "/change_requests/"+cr+"/approve/", alice, nil); code != 200 || out["status"] != "applied" {
		t.Fatalf("approve: %d %v", code, out)
	}
	for _, e := range edges {
		waitFor(t, e.name+" serving the enabled flag", func() bool {
			return featureFlags(s.decide(e, map[string]any{"distinct_id": "u"}))["hooked"] == true
		})
	}
	kinds := func() map[string]int {
		n := map[string]int{}
		for _, r := range receiver.requests() {
			var body struct {
				Event string         `json:"event"`
				Data  map[string]any `json:"data"`
			}
			if json.Unmarshal(r.body, &body) == nil && body.Data["id"] == cr {
				n[body.Event]++
			}
		}
		return n
	}
	waitFor(t, "change_request.live delivered", func() bool { return kinds()["change_request.live"] > 0 })
	time.Sleep(time.Second) // time for a second replica's duplicate, were there one
	want := map[string]int{"change_request.requested": 1, "change_request.approved": 1, "change_request.applied": 1, "change_request.live": 1}
	if got := kinds(); !maps.Equal(got, want) {
		t.Errorf("deliveries by kind %v, want %v", got, want)
	}
}

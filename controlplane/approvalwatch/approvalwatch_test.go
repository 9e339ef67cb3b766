package approvalwatch_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/bcrypt"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/approvalwatch"
	"github.com/flagedge/flagedge/controlplane/postgres"
	"github.com/flagedge/flagedge/controlplane/postgres/postgrestest"
	"github.com/flagedge/flagedge/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, postgres.Migrate)) }

func ptr[T any](v T) *T { return &v }

// TestLiveOnceEveryEdgeServesIt applies a change request while a connected edge serves an
// older version: the watcher leaves it unconfirmed; once the edge acknowledges the version
// the request made, a wake-up marks it live and queues one change_request.live event. An
// overdue request is expired by the watcher, without anyone reading it.
func TestLiveOnceEveryEdgeServesIt(t *testing.T) {
	ctx := t.Context()
	db, res, _ := postgrestest.Open(t)
	key, err := postgres.NewAuthService(db).AuthenticatePersonalKey(ctx, res.PersonalAPIKey)
	if err != nil {
		t.Fatal(err)
	}
	approver, err := postgres.CreateUser(ctx, db, "admin@example.com", "alice@example.com", "", false)
	if err != nil {
		t.Fatal(err)
	}
	s := postgres.NewServices(db, bcrypt.MinCost)
	asAdmin, asApprover := controlplane.NewContextWithUser(ctx, &key.User), controlplane.NewContextWithUser(ctx, approver)
	project := res.ProjectID
	if _, err := s.Webhooks.CreateWebhook(asAdmin, project, controlplane.WebhookUpdate{URL: ptr("https://93.184.215.14/hook"),
		Events: []string{controlplane.EventChangeRequestLive}, Secret: ptr("0123456789abcdef")}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Approvals.CreateApprovalPolicy(asAdmin, project, controlplane.ApprovalPolicyUpdate{
		ActionKey: ptr(controlplane.ActionFlagEnable), ApproverConfig: &controlplane.ApproverConfig{Users: []int64{approver.ID}, Quorum: 1}}); err != nil {
		t.Fatal(err)
	}
	// An edge connected and serving the project's current version.
	if _, _, err := postgres.NewEdgeService(db).CreateEdge(ctx, "edge-1", nil); err != nil {
		t.Fatal(err)
	}
	sessions := postgres.NewEdgeSessionStore(db)
	session := uuid.NewString()
	if err := sessions.OpenSessions(ctx, []controlplane.SessionOpening{{ID: session, ReplicaID: uuid.NewString(), Replica: "r1",
		EdgeName: "edge-1", EdgeID: "edge-1"}}); err != nil {
		t.Fatal(err)
	}
	ack := func(version int64) {
		t.Helper()
		if _, err := sessions.Acknowledge(ctx, []controlplane.Acknowledgement{{SessionID: session, EdgeName: "edge-1",
			Versions: map[int64]int64{project: version}}}); err != nil {
			t.Fatal(err)
		}
	}
	gate := func() string {
		t.Helper()
		f, err := s.Flags.CreateFlag(asAdmin, project, controlplane.FlagUpdate{Key: ptr(uuid.NewString()), Active: ptr(false)})
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.Flags.UpdateFlag(asAdmin, project, f.ID, controlplane.FlagUpdate{Active: ptr(true)})
		var gated *controlplane.ApprovalRequiredError
		if !errors.As(err, &gated) {
			t.Fatalf("not gated: %v", err)
		}
		return gated.ChangeRequest.ID
	}
	id := gate()
	d, err := s.Approvals.ApproveChangeRequest(asApprover, project, id, "")
	if err != nil || d.Status != controlplane.StateApplied {
		t.Fatalf("approve: %+v, %v", d, err)
	}
	version := d.ChangeRequest.SnapshotVersion
	ack(version - 1)

	w := approvalwatch.New(postgres.NewChangeRequestUpkeep(db), slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { w.Run(runCtx); close(done) }()
	t.Cleanup(func() { stop(); <-done })

	liveEvents := func() int {
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE kind = $1`, controlplane.EventChangeRequestLive).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	read := func() *controlplane.ChangeRequest {
		c, err := s.Approvals.FindChangeRequestByID(asAdmin, project, id)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	w.Wake()
	time.Sleep(300 * time.Millisecond)
	if c := read(); c.LiveAt != nil || liveEvents() != 0 {
		t.Fatalf("live while the edge serves version %d of %d: %+v", version-1, version, c.LiveAt)
	}
	ack(version)
	w.Wake()
	deadline := time.Now().Add(5 * time.Second)
	for read().LiveAt == nil {
		if time.Now().After(deadline) {
			t.Fatal("not confirmed live after the edge acknowledged the version")
		}
		time.Sleep(20 * time.Millisecond)
	}
	w.Wake()
	time.Sleep(200 * time.Millisecond)
	if n := liveEvents(); n != 1 {
		t.Errorf("%d change_request.live events, want 1", n)
	}
	var event json.RawMessage
	if err := db.Pool.QueryRow(ctx, `SELECT event->'object' FROM webhook_deliveries WHERE kind = $1`, controlplane.EventChangeRequestLive).Scan(&event); err != nil {
		t.Fatal(err)
	}
	var got controlplane.ChangeRequestEvent
	if json.Unmarshal(event, &got) != nil || got.ID != id || !got.Live || got.SnapshotVersion != version {
		t.Errorf("event object %s", event)
	}

	// An overdue request is expired by the watcher.
	overdue := gate()
	if _, err := db.Pool.Exec(ctx, `UPDATE change_requests SET expires_at = now() - interval '1 second' WHERE id = $1`, overdue); err != nil {
		t.Fatal(err)
	}
	w.Wake()
	deadline = time.Now().Add(5 * time.Second)
	for {
		var state string
		if err := db.Pool.QueryRow(ctx, `SELECT state FROM change_requests WHERE id = $1`, overdue).Scan(&state); err != nil {
			t.Fatal(err)
		}
		if state == controlplane.StateExpired {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("overdue request still %s", state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flagedge/flagedge/geoip/geoiptest"
	"github.com/flagedge/flagedge/internal/pgtest"
	"github.com/flagedge/flagedge/internal/tlstest"
)

// startReplicaAt starts a control-plane replica on the given addresses (127.0.0.1:0 for new
// ones) and returns it with the addresses it bound.
func (s *stack) startReplicaAt(name string, tls tlstest.Files, httpAddr, grpcAddr string) (p *process, boundHTTP, boundGRPC string) {
	s.t.Helper()
	p = start(s.t, name, binaries.controlplane, "serve", "--database-url", s.dbURL, "--http-addr", httpAddr,
		"--grpc-addr", grpcAddr, "--grpc-tls-cert", tls.Cert, "--grpc-tls-key", tls.Key, "--drain-delay", "0s")
	addrs := p.listening("control plane listening")
	boundHTTP, boundGRPC = addrs["http_addr"].(string), addrs["grpc_addr"].(string)
	waitFor(s.t, name+" ready", func() bool { return status("http://"+boundHTTP+"/_ready") == 200 })
	return p, boundHTTP, boundGRPC
}

// schedule schedules a change of the flag through the API and returns its id.
func (s *stack) schedule(flag int64, payload map[string]any, at time.Time) int64 {
	s.t.Helper()
	code, out := call(s.t, "POST", fmt.Sprintf("http://%s/api/projects/%d/scheduled_changes/", s.httpAddr, s.projectID), s.personal,
		map[string]any{"record_id": fmt.Sprint(flag), "model_name": "FeatureFlag", "payload": payload,
			"scheduled_at": at.UTC().Format(time.RFC3339Nano)})
	if code != 201 {
		s.t.Fatalf("schedule: %d %v", code, out)
	}
	return int64(out["id"].(float64))
}

// scheduledChange reads a scheduled change through the API.
func (s *stack) scheduledChange(id int64) map[string]any {
	s.t.Helper()
	code, out := call(s.t, "GET", fmt.Sprintf("http://%s/api/projects/%d/scheduled_changes/%d/", s.httpAddr, s.projectID, id), s.personal, nil)
	if code != 200 {
		s.t.Fatalf("scheduled change %d: %d %v", id, code, out)
	}
	return out
}

// checkRanOnce checks that the change was executed without failure, within a second of its
// time, and that its flag's activity log holds exactly one update, by the scheduler.
func (s *stack) checkRanOnce(id, flag int64) time.Duration {
	s.t.Helper()
	c := s.scheduledChange(id)
	if c["executed_at"] == nil || c["failure_reason"] != nil {
		s.t.Fatalf("change %d: %v", id, c)
	}
	scheduled, _ := time.Parse(time.RFC3339Nano, c["scheduled_at"].(string))
	executed, _ := time.Parse(time.RFC3339Nano, c["executed_at"].(string))
	code, out := call(s.t, "GET", fmt.Sprintf("http://%s/api/projects/%d/feature_flags/%d/activity/", s.httpAddr, s.projectID, flag), s.personal, nil)
	if code != 200 {
		s.t.Fatalf("activity: %d %v", code, out)
	}
	updates := 0
	for _, r := range out["results"].([]any) {
		entry := r.(map[string]any)
		if entry["activity"] != "updated" {
			continue
		}
		updates++
		trigger, _ := entry["detail"].(map[string]any)["trigger"].(map[string]any)
		if trigger["job_type"] != "scheduled_change" || trigger["job_id"] != fmt.Sprint(id) {
			s.t.Errorf("flag %d's update is not marked as the scheduler's: %v", flag, entry)
		}
	}
	if updates != 1 {
		s.t.Errorf("flag %d has %d updates in its activity log, want 1: %v", flag, updates, out["results"])
	}
	return executed.Sub(scheduled)
}

// TestScheduledChangesAcrossReplicas schedules changes with two control-plane replicas
// running and one edge: each runs once, within a second of its time, and the edge answers
// the new value. Then every replica stops, a change falls due, and the one replica started
// afterwards runs it.
func TestScheduledChangesAcrossReplicas(t *testing.T) {
	tls := tlstest.MustWrite(t)
	s := &stack{t: t, dbURL: pgtest.NewDatabase(t), geoipDB: geoiptest.MustWrite(t)}
	s.bootstrap()
	a, aHTTP, aGRPC := s.startReplicaAt("replica-a", tls, "127.0.0.1:0", "127.0.0.1:0")
	b, _, bGRPC := s.startReplicaAt("replica-b", tls, "127.0.0.1:0", "127.0.0.1:0")
	s.httpAddr = aHTTP
	e := s.startEdge("edge-1", "", true, "--control-plane", bGRPC+","+aGRPC, "--control-plane-ca", tls.CA)

	everyone := []any{map[string]any{"properties": []any{}, "rollout_percentage": 100}}
	nobody := []any{map[string]any{"properties": []any{}, "rollout_percentage": 0}}
	var flags, changes []int64
	at := time.Now().Add(1500 * time.Millisecond)
	for i := range 4 {
		key := fmt.Sprintf("sched-%d", i)
		if i < 3 { // off, switched on
			flags = append(flags, s.createFlag(map[string]any{"key": key, "active": false, "filters": map[string]any{"groups": everyone}}))
			changes = append(changes, s.schedule(flags[i], map[string]any{"operation": "update_status", "value": true}, at))
		} else { // on for nobody, a condition for everyone added
			flags = append(flags, s.createFlag(map[string]any{"key": key, "filters": map[string]any{"groups": nobody}}))
			changes = append(changes, s.schedule(flags[i], map[string]any{"operation": "add_release_condition",
				"value": map[string]any{"groups": everyone}}, at))
		}
	}
	// A change written after its time (a slow machine) can be late only from when it exists.
	overdue := max(0, time.Since(at))
	waitFor(t, "the edge answering every change", func() bool {
		ff := featureFlags(s.decide(e, map[string]any{"distinct_id": "u1"}))
		for i := range flags {
			if ff[fmt.Sprintf("sched-%d", i)] != true {
				return false
			}
		}
		return true
	})
	served := time.Since(at)
	for i, id := range changes {
		if late := s.checkRanOnce(id, flags[i]); late < 0 || late-overdue > time.Second {
			t.Errorf("change %d executed %s after its time", id, late)
		}
	}
	executed := strings.Count(a.logs.String(), `"scheduled change executed"`) + strings.Count(b.logs.String(), `"scheduled change executed"`)
	if executed != len(changes) {
		t.Errorf("the replicas logged %d executions of %d changes", executed, len(changes))
	}
	t.Logf("edge served all %d changes %s after their time", len(changes), served)

	// Every replica down while a change falls due: the next one to start runs it.
	late := s.createFlag(map[string]any{"key": "sched-late", "active": false, "filters": map[string]any{"groups": everyone}})
	// Due far enough ahead that both replicas have stopped before it, however slowly they
	// stop; the test looks once it is half a second overdue.
	lateDue := time.Now().Add(3 * time.Second)
	lateChange := s.schedule(late, map[string]any{"operation": "update_status", "value": true}, lateDue)
	a.stop()
	b.stop()
	time.Sleep(time.Until(lateDue.Add(500 * time.Millisecond)))
	if ff := featureFlags(s.decide(e, map[string]any{"distinct_id": "u1"})); ff["sched-late"] == true {
		t.Fatalf("the edge serves the late change with no replica running: %v", ff)
	}
	started := time.Now()
	_, s.httpAddr, _ = s.startReplicaAt("replica-b2", tls, "127.0.0.1:0", bGRPC)
	waitFor(t, "the edge answering the change that fell due while every replica was down", func() bool {
		return featureFlags(s.decide(e, map[string]any{"distinct_id": "u1"}))["sched-late"] == true
	})
	t.Logf("after the restart the edge served the overdue change in %s", time.Since(started))
	s.checkRanOnce(lateChange, late)
}

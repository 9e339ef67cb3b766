package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/flagedge/flagedge/controlplane/postgres"
	"github.com/flagedge/flagedge/geoip/geoiptest"
	"github.com/flagedge/flagedge/internal/pgcluster"
	"github.com/flagedge/flagedge/internal/pgtest"
)

// The fault suite: real processes, real PostgreSQL, and the faults production meets.

// TestEdgeFollowsAReplacedDatabase: the control plane is the source of truth. An edge holding
// snapshots of a database serves exactly what the control plane sends after it reconnects —
// the older versions of a restored backup, or another database altogether (a second
// `make run`) — also after a restart from its disk copy.
func TestEdgeFollowsAReplacedDatabase(t *testing.T) {
	s := newStack(t)
	s.createFlag(map[string]any{"key": "before-backup"})
	e := s.startEdge("edge", "", true)
	hasFlag := func(token, key string) func() bool {
		return func() bool {
			code, out := call(t, "POST", e.url+"/decide/?v=3", "", map[string]any{"api_key": token, "distinct_id": "u"})
			return code == 200 && hasKey(featureFlags(out), key)
		}
	}
	waitFor(t, "the first flag at the edge", hasFlag(s.token, "before-backup"))

	// A backup, then changes the edge follows (the project's version grows past the backup's).
	s.cp.stop()
	backup := pgtest.CopyDatabase(t, s.dbURL)
	s.startControlPlane()
	id := s.createFlag(map[string]any{"key": "after-backup"})
	s.patchFlag(id, map[string]any{"name": "changed"})
	waitFor(t, "the later flag at the edge", hasFlag(s.token, "after-backup"))

	// Restored from the backup: older versions, same database identity.
	s.cp.stop()
	s.dbURL = backup
	s.startControlPlane()
	waitFor(t, "the edge to serve the restored (older) state", func() bool {
		return hasFlag(s.token, "before-backup")() && !hasFlag(s.token, "after-backup")()
	})

	// Another database: a new identity, a new project token, likely the same project id.
	s.cp.stop()
	oldToken := s.token
	var edgeName string
	var edgeTokenHash []byte
	if err := openDB(t, s.dbURL).QueryRow(context.Background(), `SELECT name, token_sha256 FROM edges`).Scan(&edgeName, &edgeTokenHash); err != nil {
		t.Fatal(err)
	}
	s.dbURL = pgtest.NewDatabase(t)
	newDB := openDB(t, s.dbURL)
	// Test databases are copies of one migrated template and share its identity; a database
	// made by the migrations gets its own, as this gives it.
	if _, err := newDB.Exec(context.Background(), `UPDATE database_identity SET id = gen_random_uuid()`); err != nil {
		t.Fatal(err)
	}
	// The operator gives the edge a credential in the new database (here: the one it has).
	if _, err := newDB.Exec(context.Background(), `INSERT INTO edges (name, token_sha256) VALUES ($1, $2)`, edgeName, edgeTokenHash); err != nil {
		t.Fatal(err)
	}
	s.bootstrap()
	s.startControlPlane()
	s.createFlag(map[string]any{"key": "other-database"})
	waitFor(t, "the edge to serve the other database", hasFlag(s.token, "other-database"))
	if code, out := call(t, "POST", e.url+"/decide/?v=3", "", map[string]any{"api_key": oldToken, "distinct_id": "u"}); code != 401 {
		t.Errorf("the replaced database's token still works: %d %v", code, out)
	}

	// Restarted from its disk copy with the control plane down: still the new database's.
	e.stop()
	s.cp.stop()
	e = s.startEdge("edge-restarted", e.dataDir, true)
	if !hasFlag(s.token, "other-database")() {
		t.Error("after a restart from disk the edge does not serve the other database")
	}
	if code, _ := call(t, "POST", e.url+"/decide/?v=3", "", map[string]any{"api_key": oldToken, "distinct_id": "u"}); code != 401 {
		t.Errorf("after a restart from disk the replaced database's token answers %d", code)
	}
}

// poisonEvents are the inputs that once stopped an edge from storing anything.
func poisonEvents() []map[string]any {
	long := strings.Repeat("x", 5000)
	ev := func(name string, props map[string]any) map[string]any {
		return map[string]any{"event": name, "distinct_id": "poisoned", "properties": props}
	}
	return []map[string]any{
		ev("nul-value", map[string]any{"a": "x\u0000y"}),
		ev("nul-key", map[string]any{"a\u0000": 1}),
		{"event": "nul-set", "distinct_id": "poisoned", "$set": map[string]any{"a": "\u0000"}},
		{"event": "nul-id", "distinct_id": "u\u00001"},
		{"event": "nul-name\u0000", "distinct_id": "poisoned"},
		{"event": "old", "distinct_id": "poisoned", "timestamp": -1000000000000000},
		{"event": long, "distinct_id": "poisoned"},
		ev("$identify", map[string]any{"$anon_distinct_id": long}),
		ev("$create_alias", map[string]any{"alias": long}),
		ev("$groupidentify", map[string]any{"$group_type": "company", "$group_key": long}),
		ev("$groupidentify", map[string]any{"$group_type": long, "$group_key": "k"}),
	}
}

// TestPoisonBatchIsStored: a batch of 999 good events and every poison the fault run found
// is acknowledged and stored whole (the poisons made storable), and an event sent afterwards
// is stored within a second.
func TestPoisonBatchIsStored(t *testing.T) {
	s := newStack(t)
	e := s.startEdge("edge", "", true)
	batch := make([]any, 0, 1020)
	for i := range 999 {
		batch = append(batch, map[string]any{"event": "good", "distinct_id": fmt.Sprintf("g%d", i)})
	}
	for _, p := range poisonEvents() {
		batch = append(batch, p)
	}
	body := strings.TrimSuffix(string(mustJSON(t, map[string]any{"api_key": s.token, "batch": batch})), "}")
	// What encoding/json cannot write: a raw 0xff byte, a lone surrogate escape, a number
	// beyond a double.
	body = strings.Replace(body, `"batch":[`, `"batch":[{"event":"raw-ff","distinct_id":"poisoned","properties":{"a":"`+"\xff"+`"}},`+
		`{"event":"lone-surrogate","distinct_id":"poisoned","properties":{"a":"\ud800"}},`+
		`{"event":"huge-number","distinct_id":"poisoned","properties":{"a":1e200000}},`, 1) + "}"
	if code, out := post(t, "POST", e.url+"/batch/", []byte(body)); code != 200 {
		t.Fatalf("poison batch: %d %s", code, out)
	}
	sent := time.Now()
	if code, out := post(t, "POST", e.url+"/capture/", mustJSON(t, map[string]any{"api_key": s.token, "event": "after", "distinct_id": "u"})); code != 200 {
		t.Fatalf("capture after the poison batch: %d %s", code, out)
	}
	waitFor(t, "the event after the poison batch", func() bool { return s.eventCount("after") == 1 })
	next := time.Since(sent)
	if next > time.Second {
		t.Errorf("the event after the poison batch took %v to be stored, want under 1s", next)
	}
	want := 999 + len(poisonEvents()) + 3 + 1
	s.waitEventCount(want)
	var deadLetters int
	if err := openDB(t, s.dbURL).QueryRow(context.Background(), `SELECT count(*) FROM dead_letters`).Scan(&deadLetters); err != nil {
		t.Fatal(err)
	}
	t.Logf("poison batch: %d events acknowledged, %d stored, %d dead-lettered; the next event stored after %v",
		want, s.eventCount(""), deadLetters, next.Round(time.Millisecond))
}

// TestSmallSpoolQuotaRecovers: an edge with a 1 MiB spool and no control plane fills up and
// answers 503; once the control plane is back and the backlog drains, it accepts again.
func TestSmallSpoolQuotaRecovers(t *testing.T) {
	s := newStack(t)
	e := s.startEdge("edge", "", true, "--spool-quota", "1048576")
	s.cp.stop()
	pad := strings.Repeat("p", 10<<10)
	capture := func(i int) int {
		code, _ := post(t, "POST", e.url+"/capture/", mustJSON(t, map[string]any{"api_key": s.token, "event": "filler",
			"distinct_id": fmt.Sprintf("u%d", i), "properties": map[string]any{"pad": pad}}))
		return code
	}
	acked := 0
	for i := 0; ; i++ {
		code := capture(i)
		if code == 503 {
			break
		}
		if code != 200 || i > 1000 {
			t.Fatalf("capture %d: %d", i, code)
		}
		acked++
	}
	s.startControlPlane()
	s.waitEventCount(acked)
	waitFor(t, "capture accepted again", func() bool { return capture(-1) == 200 })
	s.waitEventCount(acked + 1)
	t.Logf("1 MiB spool: %d events acknowledged before 503, all stored once, accepting again after the drain", acked)
}

// TestControlPlaneOutage: with the control plane down longer than the person cache lives,
// /decide answers 200 throughout (flags that need a look-up are marked, not failed), capture
// goes on, and once the control plane is back the edge is current again within about a
// second: look-ups work, a new flag arrives, the events are stored.
func TestControlPlaneOutage(t *testing.T) {
	s := newStack(t)
	s.createFlag(map[string]any{"key": "pro-only", "filters": map[string]any{"groups": []any{map[string]any{
		"properties": []any{map[string]any{"key": "plan", "value": "pro", "type": "person"}}, "rollout_percentage": 100}}}})
	s.createFlag(map[string]any{"key": "everyone", "filters": map[string]any{"groups": []any{map[string]any{"rollout_percentage": 100}}}})
	e := s.startEdge("edge", "", true, "--person-cache-ttl", "1s", "--person-cache-miss-ttl", "1s", "--lookup-timeout", "100ms")
	decide := func() (int, map[string]any) {
		return call(t, "POST", e.url+"/decide/?v=3", "", map[string]any{"api_key": s.token, "distinct_id": "outage-user"})
	}
	// outage-user is stored: the edge's filter holds it, so its flags need a look-up.
	s.captureStored(e, "$identify", "outage-user", map[string]any{"$set": map[string]any{"plan": "pro"}})
	waitFor(t, "outage-user looked up", func() bool { _, out := decide(); return featureFlags(out)["pro-only"] == true })
	var non200, calls atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // /decide every 20 ms for the whole test
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if code, _ := decide(); code != 200 {
				non200.Add(1)
			}
			calls.Add(1)
		}
	}()
	s.cp.stop()
	down := time.Now()
	for i := range 20 {
		if code, out := post(t, "POST", e.url+"/capture/", mustJSON(t, map[string]any{"api_key": s.token, "event": "during-outage", "distinct_id": fmt.Sprintf("o%d", i)})); code != 200 {
			t.Fatalf("capture during the outage: %d %s", code, out)
		}
	}
	time.Sleep(3 * time.Second) // three person-cache lifetimes
	if _, out := decide(); out["errorsWhileComputingFlags"] != true {
		t.Errorf("with the control plane down, a flag that needs a look-up is not marked: %v", out)
	}
	// An SDK asking for one flag (flag_keys_to_evaluate) is told of errors in that flag only:
	// the look-up pro-only needed failed, and everyone needs none.
	only := func(key string) map[string]any {
		_, out := call(t, "POST", e.url+"/flags/?v=2", "", map[string]any{"token": s.token, "distinct_id": "outage-user", "flag_keys_to_evaluate": []string{key}})
		return out
	}
	if out := only("everyone"); out["errorsWhileComputingFlags"] != false || !flagEnabled(out, "everyone") {
		t.Errorf("with the control plane down, a flag that needs no look-up asked for alone: %v", out)
	}
	if out := only("pro-only"); out["errorsWhileComputingFlags"] != true {
		t.Errorf("with the control plane down, a flag that needs a look-up asked for alone: %v", out)
	}
	// A user the control plane has never seen needs no look-up: answered in full, unmarked.
	if _, out := call(t, "POST", e.url+"/decide/?v=3", "", map[string]any{"api_key": s.token, "distinct_id": "new-during-outage"}); out["errorsWhileComputingFlags"] != false || featureFlags(out)["pro-only"] != false {
		t.Errorf("with the control plane down, a new user's answer: %v", out)
	}
	s.startControlPlane()
	back := time.Now()
	waitFor(t, "look-ups to work again", func() bool { _, out := decide(); return out["errorsWhileComputingFlags"] == false })
	lookupsBack := time.Since(back)
	s.createFlag(map[string]any{"key": "made-after-outage"})
	created := time.Now()
	waitFor(t, "a new flag at the edge", func() bool { _, out := decide(); return hasKey(featureFlags(out), "made-after-outage") })
	flagArrived := time.Since(created)
	close(stop)
	wg.Wait()
	s.waitEventCount(21)
	if n := non200.Load(); n != 0 {
		t.Errorf("%d of %d /decide calls were not 200 during the outage", n, calls.Load())
	}
	if lookupsBack > 2*time.Second {
		t.Errorf("look-ups failed for %v after the control plane came back, want about 1s", lookupsBack)
	}
	t.Logf("outage of %v: %d /decide calls, all 200; look-ups back %v after the control plane; a new flag arrived in %v; 21 events stored once",
		back.Sub(down).Round(time.Millisecond), calls.Load(), lookupsBack.Round(time.Millisecond), flagArrived.Round(time.Millisecond))
}

// TestPostgresRestartUnderLoad crashes PostgreSQL while events flow: the control plane
// recovers by itself (ready again, changes reach edges again: its LISTEN is back), and every
// acknowledged event is stored exactly once.
func TestPostgresRestartUnderLoad(t *testing.T) {
	ctx := context.Background()
	// Durable: a test cluster without fsync and synchronous commit loses acknowledged commits in a
	// crash, as PostgreSQL documents; production runs with both.
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Stop)
	dbURL := cluster.URL("postgres")
	if err := postgres.Migrate(ctx, dbURL); err != nil {
		t.Fatal(err)
	}
	s := &stack{t: t, dbURL: dbURL, httpAddr: "127.0.0.1:0", grpcAddr: "127.0.0.1:0", geoipDB: geoiptest.MustWrite(t)}
	s.bootstrap()
	s.startControlPlane()
	e := s.startEdge("edge", "", true)

	l := s.startLoad([]string{e.url}, "load", 10, 10*time.Millisecond)
	time.Sleep(500 * time.Millisecond)
	if err := cluster.Crash(ctx); err != nil {
		t.Fatal(err)
	}
	crashed := time.Now()
	time.Sleep(2 * time.Second)
	if err := cluster.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	waitFor(t, "the control plane ready again", func() bool { return status("http://"+s.httpAddr+"/_ready") == 200 })
	readyAfter := time.Since(restarted)
	time.Sleep(500 * time.Millisecond)
	acked := l.finish()
	s.createFlag(map[string]any{"key": "after-restart"})
	waitFor(t, "a change made after the restart at the edge", func() bool {
		return hasKey(featureFlags(s.decide(e, map[string]any{"distinct_id": "u"})), "after-restart")
	})
	stored, dups, missing := s.storedOnce("load", acked)
	t.Logf("PostgreSQL down %v: %d events acknowledged, %d stored, %d duplicates, %d missing; control plane ready %v after the restart",
		restarted.Sub(crashed).Round(time.Millisecond), len(acked), stored, dups, missing, readyAfter.Round(time.Millisecond))
}

// TestGracefulDrain: after SIGTERM both programs answer 503 on /_ready for the drain delay
// while they still serve requests, so load balancers stop sending before the listener
// closes; then they exit cleanly.
//
// The drain delay is 3 s so that the test's own checks (503 seen, a request served) fit in it
// on a loaded machine; an early exit is judged by the time since the signal, not by a window
// that opens when the checks are done.
func TestGracefulDrain(t *testing.T) {
	const drain = 3 * time.Second
	s := newStack(t)
	s.cp.stop()
	s.cp = start(t, "controlplane", binaries.controlplane, "serve", "--database-url", s.dbURL,
		"--http-addr", s.httpAddr, "--grpc-addr", s.grpcAddr, "--drain-delay", drain.String())
	s.cp.listening("control plane listening")
	waitFor(t, "control plane ready", func() bool { return status("http://"+s.httpAddr+"/_ready") == 200 })
	e := s.startEdge("edge", "", true, "--drain-delay", drain.String())

	for _, p := range []struct {
		proc        *process
		ready, work string
	}{
		{e.process, e.url + "/_ready", e.url + "/array/" + s.token + "/config"},
		{s.cp, "http://" + s.httpAddr + "/_ready", "http://" + s.httpAddr + "/_health"},
	} {
		signalled := time.Now() // before the signal is sent: the drain cannot start earlier
		if err := p.proc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		waitFor(t, p.proc.name+" /_ready 503", func() bool { return status(p.ready) == 503 })
		if code := status(p.work); code != 200 {
			t.Errorf("%s while draining: %d, want requests still served", p.proc.name, code)
		}
		select {
		case <-p.proc.done:
			if d := time.Since(signalled); d < drain {
				t.Fatalf("%s exited %v after SIGTERM, before its drain delay", p.proc.name, d)
			}
		case <-time.After(time.Until(signalled.Add(drain))):
		}
		select {
		case <-p.proc.done:
			if !p.proc.cmd.ProcessState.Success() {
				t.Errorf("%s exited with %v", p.proc.name, p.proc.cmd.ProcessState)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not exit after its drain delay", p.proc.name)
		}
	}
}

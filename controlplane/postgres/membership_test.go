package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flagedge/flagedge/controlplane/postgres"
	"github.com/flagedge/flagedge/shared/bloomkeys"
)

// TestMembershipNotices stores distinct ids and groups through the tables, as any path would,
// and decodes what the triggers announce: every key, in chunks that fit, and "rebuild" for a
// key too long for a notification.
func TestMembershipNotices(t *testing.T) {
	t.Parallel()
	db, res, url := mustOpen(t)
	ctx := context.Background()
	listener, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(ctx)
	if _, err := listener.Exec(ctx, "LISTEN "+postgres.MembershipChannel); err != nil {
		t.Fatal(err)
	}
	var want []string
	ids := []string{"plain", `quote " and \ backslash`, "ünïcödé", strings.Repeat("é", 200)}
	for i := range 400 { // more than one notification's worth
		ids = append(ids, strings.Repeat("x", 30)+string(rune('a'+i%26))+strings.Repeat("y", i%7)+"-"+string(rune(0x4e00+i)))
	}
	for _, id := range ids {
		want = append(want, string(bloomkeys.PersonKey(nil, id)))
	}
	if _, err := db.Pool.Exec(ctx, `WITH p AS (INSERT INTO persons (project_id) VALUES ($1) RETURNING id)
		INSERT INTO person_distinct_ids (project_id, distinct_id, person_id) SELECT $1, d, p.id FROM p, unnest($2::text[]) AS d`, res.ProjectID, ids); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO groups (project_id, group_type_index, group_key) VALUES ($1, 2, 'acme "inc"')`, res.ProjectID); err != nil {
		t.Fatal(err)
	}
	want = append(want, string(bloomkeys.GroupKey(nil, 2, `acme "inc"`)))
	long := strings.Repeat("z", 9000)
	if _, err := db.Pool.Exec(ctx, `WITH p AS (INSERT INTO persons (project_id) VALUES ($1) RETURNING id)
		INSERT INTO person_distinct_ids (project_id, distinct_id, person_id) SELECT $1, $2, p.id FROM p`, res.ProjectID, long); err != nil {
		t.Fatal(err)
	}

	got := map[string]bool{}
	rebuilds, notices := 0, 0
	for len(got) < len(want) || rebuilds == 0 {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		n, err := listener.WaitForNotification(wctx)
		cancel()
		if err != nil {
			t.Fatalf("after %d keys and %d rebuilds: %v", len(got), rebuilds, err)
		}
		notices++
		if len(n.Payload) >= 8000 {
			t.Fatalf("a payload of %d bytes", len(n.Payload))
		}
		projectID, keys, rebuild, err := postgres.ParseMembershipNotice(n.Payload)
		if err != nil || projectID != res.ProjectID {
			t.Fatalf("notice %.60q: project %d, %v", n.Payload, projectID, err)
		}
		if rebuild {
			rebuilds++
		}
		for _, k := range keys {
			got[string(k)] = true
		}
	}
	for _, k := range want {
		if !got[k] {
			t.Errorf("key %.40q not announced", k)
		}
	}
	if notices < 3 {
		t.Errorf("%d notifications for %d keys: not chunked", notices, len(want))
	}
	for _, bad := range []string{"", "x p []", "1 q []", "1 p [1]", "1 g [[\"a\",\"b\"]]"} {
		if _, _, _, err := postgres.ParseMembershipNotice(bad); err == nil {
			t.Errorf("%q decoded", bad)
		}
	}
}

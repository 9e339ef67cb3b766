package postgres

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flagedge/flagedge/controlplane"
)

// EvaluationStore keeps the flag evaluation counts edges report, in hourly buckets.
type EvaluationStore struct {
	db     *DB
	pruned atomic.Int64 // unix seconds of this replica's last deletion of old buckets
}

var _ controlplane.EvaluationStore = (*EvaluationStore)(nil)

// NewEvaluationStore returns an EvaluationStore on db.
func NewEvaluationStore(db *DB) *EvaluationStore { return &EvaluationStore{db: db} }

// evaluationRetention is how long hourly buckets are kept: the 30 days the API reports, and a
// day more.
const evaluationRetention = 31 * 24 * time.Hour

// AddEvaluations adds counts to the current hour's buckets (the same flag and value reported
// twice are summed first) and records when each flag was last called. Counts of projects that
// no longer exist are dropped.
func (s *EvaluationStore) AddEvaluations(ctx context.Context, counts []controlplane.EvaluationCount) error {
	type bucket struct {
		project    int64
		key, value string
	}
	sums := map[bucket]int64{}
	for _, c := range counts {
		if c.Count > 0 {
			sums[bucket{c.ProjectID, c.FlagKey, c.Value}] += c.Count
		}
	}
	if len(sums) == 0 {
		return nil
	}
	projects, keys, values, ns := make([]int64, 0, len(sums)), make([]string, 0, len(sums)), make([]string, 0, len(sums)), make([]int64, 0, len(sums))
	for b, n := range sums {
		projects, keys, values, ns = append(projects, b.project), append(keys, b.key), append(values, b.value), append(ns, n)
	}
	now := s.db.Now()
	err := s.db.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO flag_evaluations (project_id, flag_key, value, hour, count)
			SELECT t.p, t.k, t.v, date_trunc('hour', $5::timestamptz), t.n
			FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[]) AS t(p, k, v, n)
			WHERE EXISTS (SELECT 1 FROM projects WHERE id = t.p)
			ORDER BY 1, 2, 3
			ON CONFLICT (project_id, flag_key, hour, value) DO UPDATE SET count = flag_evaluations.count + EXCLUDED.count`,
			projects, keys, values, ns, now); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO flag_last_called (project_id, flag_key, last_called_at)
			SELECT DISTINCT t.p, t.k, $3::timestamptz FROM unnest($1::bigint[], $2::text[]) AS t(p, k)
			WHERE EXISTS (SELECT 1 FROM projects WHERE id = t.p)
			ORDER BY 1, 2
			ON CONFLICT (project_id, flag_key) DO UPDATE SET last_called_at = GREATEST(flag_last_called.last_called_at, EXCLUDED.last_called_at)`,
			projects, keys, now)
		return err
	})
	if err != nil {
		return opError("add evaluations", err)
	}
	if last := s.pruned.Load(); now.Unix()-last >= 3600 && s.pruned.CompareAndSwap(last, now.Unix()) {
		if _, err := s.db.Pool.Exec(ctx, `DELETE FROM flag_evaluations WHERE hour < $1`, now.Add(-evaluationRetention)); err != nil {
			return opError("delete old evaluation counts", err)
		}
	}
	return nil
}

// FlagUsage sums the buckets of the last 1, 7 and 30 days of each flag.
func (s *EvaluationStore) FlagUsage(ctx context.Context, projectID int64, keys []string) (map[string]controlplane.FlagUsage, error) {
	now := s.db.Now()
	rows, err := s.db.Pool.Query(ctx, `SELECT l.flag_key, l.last_called_at,
			COALESCE(sum(e.count) FILTER (WHERE e.hour > $3::timestamptz - interval '1 day'), 0),
			COALESCE(sum(e.count) FILTER (WHERE e.hour > $3::timestamptz - interval '7 days'), 0),
			COALESCE(sum(e.count) FILTER (WHERE e.hour > $3::timestamptz - interval '30 days'), 0)
		FROM flag_last_called l
		LEFT JOIN flag_evaluations e ON e.project_id = l.project_id AND e.flag_key = l.flag_key
			AND e.hour > $3::timestamptz - interval '30 days'
		WHERE l.project_id = $1 AND l.flag_key = ANY ($2)
		GROUP BY l.flag_key, l.last_called_at`, projectID, keys, now)
	if err != nil {
		return nil, opError("flag usage", err)
	}
	defer rows.Close()
	out := map[string]controlplane.FlagUsage{}
	for rows.Next() {
		var key string
		var u controlplane.FlagUsage
		var last time.Time
		if err := rows.Scan(&key, &last, &u.Last1d, &u.Last7d, &u.Last30d); err != nil {
			return nil, opError("flag usage", err)
		}
		u.LastCalledAt = &last
		out[key] = u
	}
	if err := rows.Err(); err != nil {
		return nil, opError("flag usage", err)
	}
	return out, nil
}

// DailyEvaluations sums a flag's buckets per UTC day.
func (s *EvaluationStore) DailyEvaluations(ctx context.Context, projectID int64, key string, days int) ([]controlplane.DailyEvaluations, error) {
	today := s.db.Now().UTC().Truncate(24 * time.Hour)
	first := today.AddDate(0, 0, -(days - 1))
	rows, err := s.db.Pool.Query(ctx, `SELECT date_trunc('day', hour AT TIME ZONE 'UTC'), sum(count)
		FROM flag_evaluations WHERE project_id = $1 AND flag_key = $2 AND hour >= $3
		GROUP BY 1`, projectID, key, first)
	if err != nil {
		return nil, opError("daily evaluations", err)
	}
	defer rows.Close()
	byDay := map[time.Time]int64{}
	for rows.Next() {
		var day time.Time
		var n int64
		if err := rows.Scan(&day, &n); err != nil {
			return nil, opError("daily evaluations", err)
		}
		byDay[time.Date(day.Year(), day.Month(), day.Day(), 0, 0, 0, 0, time.UTC)] = n
	}
	if err := rows.Err(); err != nil {
		return nil, opError("daily evaluations", err)
	}
	out := make([]controlplane.DailyEvaluations, days)
	for i := range out {
		d := first.AddDate(0, 0, i)
		out[i] = controlplane.DailyEvaluations{Date: d, Count: byDay[d]}
	}
	return out, nil
}

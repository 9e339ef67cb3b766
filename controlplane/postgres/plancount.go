package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/valyala/fastjson"

	"github.com/flagedge/flagedge/controlplane"
)

// activePlan is what ingestion needs of a running or paused plan of the project.
type activePlan struct {
	id         int64
	flagKey    string
	step       int
	guardrails []controlplane.Guardrail
	units      int64
}

// exposure is a $feature_flag_called event's answer, and the reason the SDK gives for it.
type exposure struct {
	Flag     string          `json:"$feature_flag"`
	Response json.RawMessage `json:"$feature_flag_response"`
	Reason   json.RawMessage `json:"$feature_flag_reason"`
}

// countForPlans counts the project's freshly stored events for its active plans, in the
// ingesting transaction (which holds the project's ingestion lock): the first exposure of
// each user to a plan's flag puts them in an arm, up to controlplane.MaxPlanUnits per plan,
// and each guardrail event of an exposed user, from their exposure on, adds to their row.
//
// What it costs does not grow with plans × events in decoding: one pass over the batch reads
// each event's properties at most once for all the plans (countBatch), and three statements
// store the counts of every plan (storeCounts), after one that reads the plans and, when
// exposures did not say whether their users were eligible, one that reads those users.
func countForPlans(ctx context.Context, tx pgx.Tx, elig *planEligibility, projectID int64, events []controlplane.Event) error {
	if len(events) == 0 {
		return nil
	}
	plans, err := readActivePlans(ctx, tx, projectID)
	if err != nil || len(plans) == 0 {
		return err
	}
	counts, observed := countBatch(plans, events)
	batch := elig.forBatch(projectID)
	for i, p := range plans {
		if err := counts[i].decide(ctx, tx, batch, p); err != nil {
			return fmt.Errorf("count for release plan %d: %w", p.id, err)
		}
	}
	if err := storeCounts(ctx, tx, plans, counts, observed); err != nil {
		return fmt.Errorf("count for release plans: %w", err)
	}
	return nil
}

// readActivePlans reads the project's running and paused plans, in one statement.
func readActivePlans(ctx context.Context, tx pgx.Tx, projectID int64) ([]activePlan, error) {
	rows, err := tx.Query(ctx, `SELECT r.id, r.flag_key, r.step, r.guardrails, t.units FROM release_plans r
		JOIN release_plan_tallies t ON t.plan_id = r.id WHERE r.project_id = $1 AND r.state IN ('running', 'paused')`, projectID)
	if err != nil {
		return nil, fmt.Errorf("read release plans: %w", err)
	}
	defer rows.Close()
	var plans []activePlan
	for rows.Next() {
		var p activePlan
		var guardrails []byte
		if err := rows.Scan(&p.id, &p.flagKey, &p.step, &guardrails, &p.units); err != nil {
			return nil, fmt.Errorf("read release plans: %w", err)
		}
		if err := json.Unmarshal(guardrails, &p.guardrails); err != nil {
			return nil, fmt.Errorf("release plan %d: %w", p.id, err)
		}
		plans = append(plans, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read release plans: %w", err)
	}
	return plans, nil
}

// planCount is what one batch adds to one plan's arms, in the batch's order.
type planCount struct {
	// Exposures placed in an arm: the distinct id, whether treated, when.
	ids     []string
	treated []bool
	times   []time.Time
	// Exposures answering false whose reason did not say whether the user was eligible.
	unknown      []string
	unknownTimes []time.Time
	// The users of those whom decide could not decide either, each once: the batch counts
	// each undecided user once (storeCounts).
	undecided []string
}

// metric is what a guardrail observes of its event: one per event, or the event's numeric
// property. Plans guarded by the same metric share its observations.
type metric struct {
	event    string
	mean     bool
	property string // when mean
}

// observations are the batch's observations of the plans' metrics, each stored once
// however many plans' guardrails read it, and the guardrails that read each metric.
type observations struct {
	// One row per observation: the metric's index, the distinct id, the value, when.
	ks     []int32
	ids    []string
	values []float64
	times  []time.Time
	// One row per guardrail: its metric's index, its plan's id, its index in the plan.
	metrics []int32
	plans   []int64
	gs      []int32
}

// countBatch reads the batch once for all the plans: each $feature_flag_called once, put in
// an arm by controlplane.ClassifyExposure for every plan on its flag that is not full, and
// each guardrail event once, its numeric properties parsed once, observed once per metric.
func countBatch(plans []activePlan, events []controlplane.Event) ([]planCount, *observations) {
	counts := make([]planCount, len(plans))
	obs := &observations{}
	byFlag := map[string][]int{}
	index := map[metric]int32{}
	byEvent := map[string][]metric{}
	for i, p := range plans {
		if p.units < controlplane.MaxPlanUnits {
			byFlag[p.flagKey] = append(byFlag[p.flagKey], i)
		}
		for g, gr := range p.guardrails {
			m := metric{event: gr.Event, mean: gr.Stat == controlplane.StatMean}
			if m.mean {
				m.property = gr.Property
			}
			k, ok := index[m]
			if !ok {
				k = int32(len(index))
				index[m] = k
				byEvent[m.event] = append(byEvent[m.event], m)
			}
			obs.metrics, obs.plans, obs.gs = append(obs.metrics, k), append(obs.plans, p.id), append(obs.gs, int32(g))
		}
	}
	var props eventProperties
	for _, e := range events {
		if e.Name == "$feature_flag_called" && len(byFlag) > 0 {
			var x exposure
			if json.Unmarshal(e.Properties, &x) == nil && len(byFlag[x.Flag]) > 0 {
				var reason string
				_ = json.Unmarshal(x.Reason, &reason) // not a string: no reason
				class := controlplane.ClassifyExposure(x.Response, reason)
				for _, i := range byFlag[x.Flag] {
					c := &counts[i]
					switch class {
					case controlplane.ExposureTreatment, controlplane.ExposureControl:
						c.ids, c.treated, c.times = append(c.ids, e.DistinctID), append(c.treated, class == controlplane.ExposureTreatment), append(c.times, e.Timestamp)
					case controlplane.ExposureUnknown:
						c.unknown, c.unknownTimes = append(c.unknown, e.DistinctID), append(c.unknownTimes, e.Timestamp)
					}
				}
			}
		}
		ms := byEvent[e.Name]
		if len(ms) == 0 {
			continue
		}
		props.reset(e.Properties)
		for _, m := range ms {
			v := 1.0
			if m.mean {
				var ok bool
				if v, ok = props.number(m.property); !ok {
					continue // no numeric value: nothing to average
				}
			}
			obs.ks, obs.ids, obs.values, obs.times = append(obs.ks, index[m]), append(obs.ids, e.DistinctID), append(obs.values, v), append(obs.times, e.Timestamp)
		}
	}
	return counts, obs
}

// decide decides the users of plan p's unknown exposures through elig (decideUnknown): the
// eligible go to control, after the batch's other exposures; the rest stay undecided.
func (c *planCount) decide(ctx context.Context, tx pgx.Tx, elig *batchEligibility, p activePlan) error {
	if len(c.unknown) == 0 {
		return nil
	}
	eligible, undecided, err := decideUnknown(ctx, tx, elig, p, c.unknown)
	if err != nil {
		return err
	}
	c.undecided = undecided
	for i, d := range c.unknown {
		if eligible[d] {
			c.ids, c.treated, c.times = append(c.ids, d), append(c.treated, false), append(c.times, c.unknownTimes[i])
		}
	}
	return nil
}

// eventProperties reads the numeric properties of one event that mean guardrails average,
// parsing its properties at most once however many plans ask.
type eventProperties struct {
	parser fastjson.Parser
	raw    json.RawMessage
	parsed bool
	object *fastjson.Object           // the properties, when fastjson parsed an object
	slow   map[string]json.RawMessage // the properties, when only encoding/json could
	cached []cachedNumber
	buf    []byte
}

// cachedNumber is what number answered for one property of the current event.
type cachedNumber struct {
	name  string
	value float64
	ok    bool
}

// reset makes p read raw, an event's properties, from now on.
func (p *eventProperties) reset(raw json.RawMessage) {
	p.raw, p.parsed, p.object, p.slow, p.cached = raw, false, nil, nil, p.cached[:0]
}

// number returns the value of the property name as a guardrail averages it, and false when
// there is none to average. It answers as json.Unmarshal of the properties into a map, then
// of the property's value into a float64, does: the last of repeated keys counts, and a
// number out of float64's range has no value; nor has null (an event that did not measure
// the property adds nothing to the mean).
func (p *eventProperties) number(name string) (float64, bool) {
	for _, c := range p.cached {
		if c.name == name {
			return c.value, c.ok
		}
	}
	if !p.parsed {
		p.parsed = true
		if v, err := p.parser.ParseBytes(p.raw); err == nil {
			p.object, _ = v.Object() // not an object: no properties
		} else if json.Unmarshal(p.raw, &p.slow) != nil { // what fastjson refuses, encoding/json may take
			p.slow = nil
		}
	}
	var raw []byte
	switch {
	case p.object != nil:
		var found *fastjson.Value
		p.object.Visit(func(k []byte, v *fastjson.Value) {
			if string(k) == name {
				found = v
			}
		})
		if found != nil {
			p.buf = found.MarshalTo(p.buf[:0]) // a number's own text
			raw = p.buf
		}
	case p.slow != nil:
		raw = p.slow[name]
	}
	v := 1.0
	ok := raw != nil && string(raw) != "null" && json.Unmarshal(raw, &v) == nil
	p.cached = append(p.cached, cachedNumber{name: name, value: v, ok: ok})
	return v, ok
}

// storeCounts stores the batch's counts for every plan in three statements, in the order one
// plan's counting needs: the arms, then the undecided (users whom no arm holds), then the
// guardrail values (each observation for every guardrail of its metric, of users in an arm
// from before the event).
func storeCounts(ctx context.Context, tx pgx.Tx, plans []activePlan, counts []planCount, obs *observations) error {
	var armPlans, roomPlans, room []int64
	var armIDs []string
	var armTreated []bool
	var armTimes []time.Time
	var steps []int32
	var undecidedPlans []int64
	var undecided []string
	for i, p := range plans {
		c := &counts[i]
		if len(c.ids) > 0 {
			roomPlans, room, steps = append(roomPlans, p.id), append(room, controlplane.MaxPlanUnits-p.units), append(steps, int32(p.step))
			for range c.ids {
				armPlans = append(armPlans, p.id)
			}
			armIDs, armTreated, armTimes = append(armIDs, c.ids...), append(armTreated, c.treated...), append(armTimes, c.times...)
		}
		for range c.undecided {
			undecidedPlans = append(undecidedPlans, p.id)
		}
		undecided = append(undecided, c.undecided...)
	}
	// Each plan takes its users' first exposure, the first of them by distinct id up to its
	// room, and counts those it did not hold yet.
	if len(armIDs) > 0 {
		if _, err := tx.Exec(ctx, `WITH x AS (SELECT DISTINCT ON (p, d) p, d, t, ts
				FROM unnest($1::bigint[], $2::text[], $3::bool[], $4::timestamptz[]) AS x(p, d, t, ts) ORDER BY p, d, ts),
			ranked AS (SELECT x.p, x.d, x.t, x.ts, l.step, l.room, row_number() OVER (PARTITION BY x.p ORDER BY x.d) AS n
				FROM x JOIN unnest($5::bigint[], $6::bigint[], $7::int[]) AS l(p, room, step) ON l.p = x.p),
			ins AS (INSERT INTO release_plan_units (plan_id, distinct_id, treatment, step, exposed_at)
				SELECT p, d, t, step, ts FROM ranked WHERE n <= room ON CONFLICT DO NOTHING RETURNING plan_id)
			UPDATE release_plan_tallies t SET units = t.units + c.n
			FROM (SELECT plan_id, count(*) AS n FROM ins GROUP BY plan_id) c WHERE t.plan_id = c.plan_id`,
			armPlans, armIDs, armTreated, armTimes, roomPlans, room, steps); err != nil {
			return fmt.Errorf("arms: %w", err)
		}
	}
	// The undecided are exposures of users not decided, counted once per user per batch (not
	// once per plan: a later batch counts them again), for each plan that holds them in no
	// arm (an exposure of theirs, in this batch or before, may have placed them).
	if len(undecided) > 0 {
		if _, err := tx.Exec(ctx, `UPDATE release_plan_tallies t SET undecided = t.undecided + c.n
			FROM (SELECT x.p, count(*) AS n FROM unnest($1::bigint[], $2::text[]) AS x(p, d)
				WHERE NOT EXISTS (SELECT 1 FROM release_plan_units u WHERE u.plan_id = x.p AND u.distinct_id = x.d) GROUP BY x.p) c
			WHERE t.plan_id = c.p`, undecidedPlans, undecided); err != nil {
			return fmt.Errorf("undecided: %w", err)
		}
	}
	if len(obs.ks) > 0 {
		if _, err := tx.Exec(ctx, `INSERT INTO release_plan_values AS v (plan_id, guardrail, distinct_id, events, total)
			SELECT m.p, m.g, x.d, count(*), sum(x.v)
			FROM unnest($1::int[], $2::text[], $3::float8[], $4::timestamptz[]) AS x(k, d, v, ts)
			JOIN unnest($5::int[], $6::bigint[], $7::int[]) AS m(k, p, g) ON m.k = x.k
			JOIN release_plan_units u ON u.plan_id = m.p AND u.distinct_id = x.d AND u.exposed_at <= x.ts
			GROUP BY m.p, m.g, x.d
			ON CONFLICT (plan_id, guardrail, distinct_id) DO UPDATE SET events = v.events + excluded.events, total = v.total + excluded.total`,
			obs.ks, obs.ids, obs.values, obs.times, obs.metrics, obs.plans, obs.gs); err != nil {
			return fmt.Errorf("guardrail values: %w", err)
		}
	}
	return nil
}

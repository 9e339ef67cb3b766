// Package flageval evaluates a project's flags at the control plane with the engine and the
// stored properties the edges use, for the flag actions: evaluation reasons, a user's flags,
// blast radius, static cohorts from a flag, and cohort sizes. Scans over all persons go in
// batches, so a project with millions of persons is never held in memory at once.
package flageval

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/shared/flags"
)

// batchSize is how many persons or groups one scan step reads: large enough to amortise the
// round trip, small enough to keep memory flat.
const batchSize = 2000

// Evaluator evaluates flags for stored persons and groups. Its zero value's cache is ready:
// set the stores and use it.
type Evaluator struct {
	Snapshots controlplane.SnapshotStore
	Persons   controlplane.PersonStore
	Scanner   controlplane.PersonScanner

	compiled compiledCache
}

// maxCompiled bounds the compiled projects an Evaluator keeps: one per project, and an
// organisation has a handful; past it, one kept project is dropped for each new one.
const maxCompiled = 64

// compiledCache keeps each project's compiled snapshot of the last version asked for, so that
// the console's pages and the API's flag actions compile a project once per version, not
// once per request.
type compiledCache struct {
	mu        sync.Mutex
	byProject map[int64]*Project
}

// get returns the project compiled at version, or nil.
func (c *compiledCache) get(projectID, version int64) *Project {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.byProject[projectID]; p != nil && p.Definition.Version == version {
		return p
	}
	return nil
}

// put keeps p as its project's compiled snapshot, unless a later version is kept already.
func (c *compiledCache) put(p *Project) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id := p.Definition.ProjectID
	if old := c.byProject[id]; old != nil && old.Definition.Version > p.Definition.Version {
		return
	}
	if c.byProject == nil {
		c.byProject = map[int64]*Project{}
	}
	if _, ok := c.byProject[id]; !ok && len(c.byProject) >= maxCompiled {
		for other := range c.byProject {
			delete(c.byProject, other)
			break
		}
	}
	c.byProject[id] = p
}

// Project is a project's flags, compiled, with what they were compiled from.
type Project struct {
	Snapshot   *flags.Snapshot
	Definition *controlplane.ProjectSnapshot
	def        flags.Project
}

// Definitions returns the SDK flag definitions document of the project, as the edges serve it.
func (p *Project) Definitions(sendCohorts bool) ([]byte, error) {
	return flags.DefinitionsBody(p.Definition.ProjectID, p.def, sendCohorts)
}

// GroupTypeIndex returns the index of a group type name, or -1.
func (p *Project) GroupTypeIndex(name string) int {
	for _, g := range p.Definition.GroupTypes {
		if g.GroupType == name {
			return g.Index
		}
	}
	return -1
}

// Compile returns a project's current flags compiled: built and compiled once per snapshot
// version (one query for the version when it is compiled already). The Project is shared and
// must not be changed.
func (e *Evaluator) Compile(ctx context.Context, projectID int64) (*Project, error) {
	version, err := e.Snapshots.ProjectVersion(ctx, projectID)
	if err != nil {
		return nil, err
	}
	if p := e.compiled.get(projectID, version); p != nil {
		return p, nil
	}
	p, err := e.build(ctx, projectID)
	if err != nil {
		return nil, err
	}
	e.compiled.put(p)
	return p, nil
}

// build reads and compiles a project's current flags.
func (e *Evaluator) build(ctx context.Context, projectID int64) (*Project, error) {
	snap, err := e.Snapshots.BuildSnapshot(ctx, projectID)
	if err != nil {
		return nil, err
	}
	def := Definition(snap)
	compiled, err := flags.Compile(def)
	if err != nil {
		return nil, fmt.Errorf("compile project %d: %w", projectID, err)
	}
	return &Project{Snapshot: compiled, Definition: snap, def: def}, nil
}

// Definition converts a project snapshot into the engine's input.
func Definition(snap *controlplane.ProjectSnapshot) flags.Project {
	def := flags.Project{Flags: snap.Flags, Cohorts: snap.Cohorts, GroupTypes: map[int]string{}}
	for _, g := range snap.GroupTypes {
		def.GroupTypes[g.Index] = g.GroupType
	}
	return def
}

// ForDistinctID evaluates every flag for a distinct id and groups (type name → key) with
// their stored properties.
func (e *Evaluator) ForDistinctID(ctx context.Context, p *Project, distinctID string, groups map[string]string) ([]flags.Result, error) {
	return e.ForRequest(ctx, p, flags.Request{DistinctID: distinctID, Groups: groups})
}

// ForRequest evaluates every flag for req's distinct id and groups with their stored
// properties, under the request's own person and group properties.
func (e *Evaluator) ForRequest(ctx context.Context, p *Project, req flags.Request) ([]flags.Result, error) {
	distinctID, groups := req.DistinctID, req.Groups
	person, err := e.Persons.LookupPerson(ctx, p.Definition.ProjectID, distinctID)
	if err != nil {
		return nil, err
	}
	if person != nil {
		if err := json.Unmarshal(person.Properties, &req.StoredPerson); err != nil {
			return nil, err
		}
		req.StaticCohorts, req.HashKeyOverrides = person.StaticCohortIDs, person.HashKeyOverrides
	}
	var refs []controlplane.GroupRef
	for name, key := range groups {
		if i := p.GroupTypeIndex(name); i >= 0 {
			refs = append(refs, controlplane.GroupRef{TypeIndex: i, Key: key})
		}
	}
	if len(refs) > 0 {
		stored, err := e.Persons.LookupGroups(ctx, p.Definition.ProjectID, refs)
		if err != nil {
			return nil, err
		}
		req.StoredGroups = map[string]flags.Properties{}
		for _, g := range stored {
			var props flags.Properties
			if err := json.Unmarshal(g.Properties, &props); err != nil {
				return nil, err
			}
			req.StoredGroups[p.def.GroupTypes[g.TypeIndex]] = props
		}
	}
	return p.Snapshot.Evaluate(&req, nil), nil
}

// EachPersonResult evaluates a compiled snapshot for every stored person of the project, in
// batches, calling fn with the person and the results (valid until fn returns).
func (e *Evaluator) EachPersonResult(ctx context.Context, projectID int64, snap *flags.Snapshot,
	fn func(person *controlplane.StoredPersonRow, results []flags.Result) error) error {
	var results []flags.Result
	_, err := e.eachPerson(ctx, projectID, 0, func(row *controlplane.StoredPersonRow, req *flags.Request) error {
		results = snap.Evaluate(req, results)
		return fn(row, results)
	})
	return err
}

// eachPerson calls fn with the evaluation request of each stored person of the project, in
// batches, up to limit persons (0: all); more reports whether some were left.
func (e *Evaluator) eachPerson(ctx context.Context, projectID int64, limit int,
	fn func(person *controlplane.StoredPersonRow, req *flags.Request) error) (more bool, err error) {
	var after int64
	seen := 0
	for {
		n := batchSize
		if limit > 0 {
			n = min(n, limit-seen+1) // one more than the limit tells whether there is more
		}
		batch, err := e.Scanner.ScanPersons(ctx, projectID, after, n)
		if err != nil {
			return false, err
		}
		for i := range batch {
			if limit > 0 && seen == limit {
				return true, nil
			}
			row := &batch[i]
			req := flags.Request{DistinctID: row.DistinctID, StaticCohorts: row.StaticCohorts}
			if err := json.Unmarshal(row.Properties, &req.StoredPerson); err != nil {
				return false, err
			}
			if err := fn(row, &req); err != nil {
				return false, err
			}
			seen++
		}
		if len(batch) < n {
			return false, nil
		}
		after = batch[len(batch)-1].ID
	}
}

// EachGroupResult does the same over the project's groups of one type.
func (e *Evaluator) EachGroupResult(ctx context.Context, projectID int64, typeIndex int, typeName string, snap *flags.Snapshot,
	fn func(results []flags.Result) error) error {
	var results []flags.Result
	_, err := e.eachGroup(ctx, projectID, typeIndex, typeName, 0, func(req *flags.Request) error {
		results = snap.Evaluate(req, results)
		return fn(results)
	})
	return err
}

// eachGroup calls fn with the evaluation request of each stored group of one type, in
// batches, up to limit groups (0: all); more reports whether some were left.
func (e *Evaluator) eachGroup(ctx context.Context, projectID int64, typeIndex int, typeName string, limit int,
	fn func(req *flags.Request) error) (more bool, err error) {
	after := ""
	seen := 0
	for {
		n := batchSize
		if limit > 0 {
			n = min(n, limit-seen+1)
		}
		batch, err := e.Scanner.ScanGroups(ctx, projectID, typeIndex, after, n)
		if err != nil {
			return false, err
		}
		for _, g := range batch {
			if limit > 0 && seen == limit {
				return true, nil
			}
			var props flags.Properties
			if err := json.Unmarshal(g.Properties, &props); err != nil {
				return false, err
			}
			req := flags.Request{Groups: map[string]string{typeName: g.Key}, StoredGroups: map[string]flags.Properties{typeName: props}}
			if err := fn(&req); err != nil {
				return false, err
			}
			seen++
		}
		if len(batch) < n {
			return false, nil
		}
		after = batch[len(batch)-1].Key
	}
}

// BlastRadius counts the stored persons (or groups of groupTypeIndex) a condition reaches,
// and how many there are. With flagKey the rollout is applied per person by the flag's hash,
// exactly as evaluation does; without it the rollout share of the matching ones is counted
// (rounded), since a rollout's hash depends on the flag's key.
func (e *Evaluator) BlastRadius(ctx context.Context, p *Project, condition json.RawMessage, groupTypeIndex *int, flagKey string) (affected, total int, err error) {
	r, err := e.BlastRadii(ctx, p, []json.RawMessage{condition}, groupTypeIndex, flagKey, 0)
	if err != nil {
		return 0, 0, err
	}
	if r.Errs[0] != nil {
		return 0, 0, r.Errs[0]
	}
	return r.Affected[0], r.Total, nil
}

// Radii are the reach of several conditions over one scan.
type Radii struct {
	// Affected and Errs are per condition: how many of the scanned persons or groups it
	// reaches, or why it could not be counted.
	Affected []int
	Errs     []error
	// Total is how many were scanned; Complete is false when limit stopped the scan before
	// the last of them.
	Total    int
	Complete bool
}

// BlastRadii counts, as BlastRadius does, the reach of each condition, in one scan over the
// stored persons (or groups) instead of one scan per condition, and over at most limit of
// them (0: all): a console page shows the reach of every condition of a flag at a bounded
// cost, whatever the number of stored persons.
func (e *Evaluator) BlastRadii(ctx context.Context, p *Project, conditions []json.RawMessage, groupTypeIndex *int, flagKey string, limit int) (*Radii, error) {
	r := &Radii{Affected: make([]int, len(conditions)), Errs: make([]error, len(conditions))}
	snaps := make([]*flags.Snapshot, len(conditions))
	shares := make([]float64, len(conditions)) // the rollout counted as a share, or -1
	for i, cond := range conditions {
		snaps[i], shares[i], r.Errs[i] = conditionSnapshot(p, cond, groupTypeIndex, flagKey)
	}
	var results []flags.Result
	count := func(req *flags.Request) error {
		r.Total++
		for i, snap := range snaps {
			if snap == nil {
				continue
			}
			if results = snap.Evaluate(req, results); results[0].Enabled {
				r.Affected[i]++
			}
		}
		return nil
	}
	var more bool
	var err error
	if groupTypeIndex != nil {
		name, ok := p.def.GroupTypes[*groupTypeIndex]
		if !ok {
			r.Complete = true
			return r, nil // no such group type: no groups
		}
		more, err = e.eachGroup(ctx, p.Definition.ProjectID, *groupTypeIndex, name, limit, count)
	} else {
		more, err = e.eachPerson(ctx, p.Definition.ProjectID, limit, func(_ *controlplane.StoredPersonRow, req *flags.Request) error { return count(req) })
	}
	if err != nil {
		return nil, err
	}
	r.Complete = !more
	for i, share := range shares {
		if share >= 0 {
			r.Affected[i] = int(float64(r.Affected[i])*share/100 + 0.5)
		}
	}
	return r, nil
}

// conditionSnapshot compiles one condition as the only flag of the project's definition, and
// returns the rollout to count as a share (-1 when the flag's hash applies it).
func conditionSnapshot(p *Project, condition json.RawMessage, groupTypeIndex *int, flagKey string) (*flags.Snapshot, float64, error) {
	var cond map[string]any
	if err := json.Unmarshal(condition, &cond); err != nil || cond == nil {
		return nil, -1, controlplane.FieldError("condition", "invalid_input", "condition must be an object with properties and rollout_percentage.")
	}
	share := -1.0
	if flagKey == "" {
		if rollout, ok := cond["rollout_percentage"].(float64); ok {
			share = rollout
		}
		delete(cond, "rollout_percentage") // applied as a share
	}
	filters := map[string]any{"groups": []any{cond}}
	if groupTypeIndex != nil {
		filters["aggregation_group_type_index"] = *groupTypeIndex
	}
	raw, _ := json.Marshal(filters)
	key := flagKey
	if key == "" {
		key = "blast-radius"
	}
	def := p.def
	def.Flags = []flags.FlagDefinition{{ID: 1, Key: key, Active: true, Filters: raw}}
	snap, err := flags.Compile(def)
	if err != nil {
		return nil, -1, controlplane.FieldError("condition", "invalid_input", err.Error())
	}
	return snap, share, nil
}

// CohortSize counts the stored persons in a property cohort.
func (e *Evaluator) CohortSize(ctx context.Context, p *Project, cohortID int64) (int, error) {
	filters := `{"groups": [{"properties": [{"key": "id", "type": "cohort", "operator": "in", "value": ` + strconv.FormatInt(cohortID, 10) + `}]}]}`
	def := p.def
	def.Flags = []flags.FlagDefinition{{ID: 1, Key: "cohort-size", Active: true, Filters: json.RawMessage(filters)}}
	snap, err := flags.Compile(def)
	if err != nil {
		return 0, err
	}
	n := 0
	err = e.EachPersonResult(ctx, p.Definition.ProjectID, snap, func(_ *controlplane.StoredPersonRow, r []flags.Result) error {
		if r[0].Enabled {
			n++
		}
		return nil
	})
	return n, err
}

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

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/shared/flags"
)

// batchSize is how many persons or groups one scan step reads: large enough to amortise the
// round trip, small enough to keep memory flat.
const batchSize = 2000

// Evaluator evaluates flags for stored persons and groups.
type Evaluator struct {
	Snapshots controlplane.SnapshotStore
	Persons   controlplane.PersonStore
	Scanner   controlplane.PersonScanner
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

// Compile reads and compiles a project's current flags.
func (e *Evaluator) Compile(ctx context.Context, projectID int64) (*Project, error) {
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
	var after int64
	var results []flags.Result
	for {
		batch, err := e.Scanner.ScanPersons(ctx, projectID, after, batchSize)
		if err != nil {
			return err
		}
		for i := range batch {
			row := &batch[i]
			req := flags.Request{DistinctID: row.DistinctID, StaticCohorts: row.StaticCohorts}
			if err := json.Unmarshal(row.Properties, &req.StoredPerson); err != nil {
				return err
			}
			results = snap.Evaluate(&req, results)
			if err := fn(row, results); err != nil {
				return err
			}
		}
		if len(batch) < batchSize {
			return nil
		}
		after = batch[len(batch)-1].ID
	}
}

// EachGroupResult does the same over the project's groups of one type.
func (e *Evaluator) EachGroupResult(ctx context.Context, projectID int64, typeIndex int, typeName string, snap *flags.Snapshot,
	fn func(results []flags.Result) error) error {
	after := ""
	var results []flags.Result
	for {
		batch, err := e.Scanner.ScanGroups(ctx, projectID, typeIndex, after, batchSize)
		if err != nil {
			return err
		}
		for _, g := range batch {
			var props flags.Properties
			if err := json.Unmarshal(g.Properties, &props); err != nil {
				return err
			}
			req := flags.Request{Groups: map[string]string{typeName: g.Key}, StoredGroups: map[string]flags.Properties{typeName: props}}
			results = snap.Evaluate(&req, results)
			if err := fn(results); err != nil {
				return err
			}
		}
		if len(batch) < batchSize {
			return nil
		}
		after = batch[len(batch)-1].Key
	}
}

// BlastRadius counts the stored persons (or groups of groupTypeIndex) a condition reaches,
// and how many there are. With flagKey the rollout is applied per person by the flag's hash,
// exactly as evaluation does; without it the rollout share of the matching ones is counted
// (rounded), since a rollout's hash depends on the flag's key.
func (e *Evaluator) BlastRadius(ctx context.Context, p *Project, condition json.RawMessage, groupTypeIndex *int, flagKey string) (affected, total int, err error) {
	var cond map[string]any
	if err := json.Unmarshal(condition, &cond); err != nil || cond == nil {
		return 0, 0, controlplane.FieldError("condition", "invalid_input", "condition must be an object with properties and rollout_percentage.")
	}
	rollout, hasRollout := cond["rollout_percentage"].(float64)
	if flagKey == "" {
		delete(cond, "rollout_percentage") // applied as a share below
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
		return 0, 0, controlplane.FieldError("condition", "invalid_input", err.Error())
	}
	count := func(results []flags.Result) error {
		total++
		if results[0].Enabled {
			affected++
		}
		return nil
	}
	if groupTypeIndex != nil {
		name, ok := def.GroupTypes[*groupTypeIndex]
		if !ok {
			return 0, 0, nil // no such group type: no groups
		}
		err = e.EachGroupResult(ctx, p.Definition.ProjectID, *groupTypeIndex, name, snap, count)
	} else {
		err = e.EachPersonResult(ctx, p.Definition.ProjectID, snap, func(_ *controlplane.StoredPersonRow, r []flags.Result) error { return count(r) })
	}
	if err != nil {
		return 0, 0, err
	}
	if flagKey == "" && hasRollout {
		affected = int(float64(affected)*rollout/100 + 0.5)
	}
	return affected, total, nil
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

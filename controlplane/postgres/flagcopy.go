package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flagedge/flagedge/controlplane"
)

var _ controlplane.FlagCopyService = (*FlagService)(nil)

// sourceFlag is a flag of the source project with whether the user may change it.
type sourceFlag struct {
	*controlplane.Flag
	editable bool
}

// sourceCohort is a cohort of the source project that a copy may carry.
type sourceCohort struct {
	id          int64
	name        string
	description string
	filters     json.RawMessage
	static      bool
}

// sourceSchedule is a pending scheduled change of a copied flag.
type sourceSchedule struct {
	payload     json.RawMessage
	scheduledAt time.Time
}

// copySource is what a copy reads of the source project, once for all its targets.
type copySource struct {
	projectID int64
	flags     map[int64]*sourceFlag
	byKey     map[string]*sourceFlag
	root      *sourceFlag
	// deps are the flags the root depends on, transitively, each after its own dependencies
	// (CopyDependencies only); edges are the dependencies of each flag of the graph and roots
	// the root's own.
	deps  []*sourceFlag
	edges map[int64][]int64
	roots []int64
	// cohorts are the cohorts the copied flags and schedules use, nested ones included.
	cohorts map[int64]*sourceCohort
	// schedules are the pending scheduled changes of each copied flag (CopySchedule only).
	schedules map[int64][]sourceSchedule
}

var digits = regexp.MustCompile(`^[0-9]+$`)

// resolve is the flag a condition's reference names in the source project, as PostHog reads
// it: an id first when the reference is one, else a key.
func (src *copySource) resolve(ref string) *sourceFlag {
	if digits.MatchString(ref) {
		if id, err := strconv.ParseInt(ref, 10, 64); err == nil {
			if f := src.flags[id]; f != nil {
				return f
			}
		}
	}
	return src.byKey[ref]
}

// dependency resolves a reference for RemapFlagDependencies: only flags the user may change
// count, as PostHog's copy reads them.
func (src *copySource) dependency(ref string) (controlplane.SourceDependency, bool) {
	f := src.resolve(ref)
	if f == nil || !f.editable {
		return controlplane.SourceDependency{}, false
	}
	return controlplane.SourceDependency{Key: f.Key, Active: f.Active}, true
}

// readCopySource reads the source project's flags (checking that the project is of the
// organisation), the flag to copy, which the user must be allowed to change, and with
// dependencies the graph of the flags it depends on. Cohorts and schedules are read by
// readCopyCarriage.
func readCopySource(ctx context.Context, q dbConn, u *controlplane.User, orgID int64, req controlplane.FlagCopyRequest) (*copySource, error) {
	rows, err := q.Query(ctx, `SELECT `+flagColumns+`, `+flagRoleAccessColumns+flagFrom("feature_flags")+`
		JOIN projects p ON p.id = f.project_id WHERE f.project_id = $1 AND p.organization_id = $2 AND NOT f.deleted`,
		req.SourceProjectID, orgID, u.ID, controlplane.AccessLevelEdit)
	if err != nil {
		return nil, err
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*sourceFlag, error) {
		var access controlplane.FlagRoleAccess
		f, err := scanFlag(r, &access.Restricted, &access.Editor)
		if err != nil {
			return nil, err
		}
		return &sourceFlag{Flag: f, editable: controlplane.CanEditFlag(u, orgID, f, access)}, nil
	})
	if err != nil {
		return nil, err
	}
	src := &copySource{projectID: req.SourceProjectID, flags: map[int64]*sourceFlag{}, byKey: map[string]*sourceFlag{},
		edges: map[int64][]int64{}, cohorts: map[int64]*sourceCohort{}, schedules: map[int64][]sourceSchedule{}}
	for _, f := range list {
		src.flags[f.ID], src.byKey[f.Key] = f, f
	}
	if src.root = src.byKey[req.FeatureFlagKey]; src.root == nil {
		return nil, controlplane.ErrCopySourceMissing
	}
	if !src.root.editable {
		return nil, controlplane.ErrCopyForbidden
	}
	return src, nil
}

// resolveGraph finds the flags the root depends on, transitively, as PostHog's copy does:
// every reference must name a flag of the source project the user may change, no path may
// lead back to a flag on it, and at most MaxCopyDependencies flags come along.
func (src *copySource) resolveGraph() error {
	visiting, visited, discovered := map[int64]bool{}, map[int64]bool{}, map[int64]bool{}
	var visit func(f *sourceFlag) error
	visit = func(f *sourceFlag) error {
		if visiting[f.ID] {
			return controlplane.ErrCopyDependencyCycle
		}
		if visited[f.ID] {
			return nil
		}
		visiting[f.ID] = true
		var direct []int64
		for _, ref := range controlplane.FlagReferences(f.Filters) {
			dep := src.resolve(ref)
			if dep == nil {
				return controlplane.ErrCopyUnresolvedDependency(ref)
			}
			if !dep.editable {
				return controlplane.ErrCopyDependencyForbidden
			}
			if dep.ID != src.root.ID {
				direct = append(direct, dep.ID)
				if !visited[dep.ID] && !visiting[dep.ID] && !discovered[dep.ID] {
					discovered[dep.ID] = true
					if len(discovered) > controlplane.MaxCopyDependencies {
						return controlplane.ErrCopyTooManyDependencies
					}
				}
			}
			if err := visit(dep); err != nil {
				return err
			}
		}
		src.edges[f.ID] = direct
		delete(visiting, f.ID)
		visited[f.ID] = true
		if f.ID != src.root.ID {
			src.deps = append(src.deps, f)
		}
		return nil
	}
	if err := visit(src.root); err != nil {
		return err
	}
	src.roots = src.edges[src.root.ID]
	return nil
}

// readCopyCarriage reads what the copied flags bring along: their pending scheduled changes
// (with CopySchedule) and the cohorts they and those changes use, with the cohorts those use.
func (src *copySource) readCopyCarriage(ctx context.Context, q dbConn, copySchedule bool) error {
	copied := append([]*sourceFlag{src.root}, src.deps...)
	var wanted []int64
	for _, f := range copied {
		wanted = append(wanted, controlplane.CohortReferences(f.Filters)...)
	}
	if copySchedule {
		ids := make([]string, len(copied))
		for i, f := range copied {
			ids[i] = strconv.FormatInt(f.ID, 10)
		}
		rows, err := q.Query(ctx, `SELECT record_id::bigint, payload, scheduled_at FROM scheduled_changes
			WHERE project_id = $1 AND model_name = $2 AND record_id = ANY($3) AND executed_at IS NULL ORDER BY scheduled_at, id`,
			src.projectID, controlplane.ModelFeatureFlag, ids)
		if err != nil {
			return err
		}
		var flagID int64
		var s sourceSchedule
		if _, err := pgx.ForEachRow(rows, []any{&flagID, &s.payload, &s.scheduledAt}, func() error {
			src.schedules[flagID] = append(src.schedules[flagID], sourceSchedule{payload: slices.Clone(s.payload), scheduledAt: s.scheduledAt})
			wanted = append(wanted, controlplane.CohortReferences(s.payload)...)
			return nil
		}); err != nil {
			return err
		}
	}
	for len(wanted) > 0 {
		var missing []int64
		for _, id := range wanted {
			if _, ok := src.cohorts[id]; !ok {
				missing = append(missing, id)
			}
		}
		if len(missing) == 0 {
			return nil
		}
		rows, err := q.Query(ctx, `SELECT id, name, description, filters, is_static FROM cohorts
			WHERE project_id = $1 AND id = ANY($2) AND NOT deleted`, src.projectID, missing)
		if err != nil {
			return err
		}
		var c sourceCohort
		wanted = nil
		if _, err := pgx.ForEachRow(rows, []any{&c.id, &c.name, &c.description, &c.filters, &c.static}, func() error {
			read := c
			read.filters = slices.Clone(c.filters)
			src.cohorts[c.id] = &read
			wanted = append(wanted, controlplane.CohortReferences(c.filters)...)
			return nil
		}); err != nil {
			return err
		}
		for _, id := range missing {
			if _, ok := src.cohorts[id]; !ok {
				src.cohorts[id] = nil // no such cohort in the source: its references stay as they are
			}
		}
	}
	return nil
}

// dependencyDecision is what a copy with dependencies does with one dependency in a target.
type dependencyDecision struct {
	ok           bool
	copy, reused map[string]bool
}

// decideDependencies decides, for a target whose flags of the graph's keys are target, which
// dependencies to copy and which to reuse, as PostHog does: a dependency active in the target
// is reused; one disabled in the source, or present but disabled in the target, cannot be
// copied (nor what depends on it), with a warning; any other is copied after its own.
func (src *copySource) decideDependencies(target map[string]controlplane.TargetFlag) (copied, reused map[string]bool, warnings []string) {
	decided := map[int64]dependencyDecision{}
	deny := func(id int64, warning string) dependencyDecision {
		if warning != "" {
			warnings = append(warnings, warning)
		}
		decided[id] = dependencyDecision{}
		return decided[id]
	}
	var decide func(id int64) dependencyDecision
	decide = func(id int64) dependencyDecision {
		if d, ok := decided[id]; ok {
			return d
		}
		f := src.flags[id]
		if !f.Active {
			return deny(id, fmt.Sprintf("Cannot automatically copy dependency flag '%s' because it is disabled in the source project.", f.Key))
		}
		if t, ok := target[f.Key]; ok {
			if t.Active {
				decided[id] = dependencyDecision{ok: true, reused: map[string]bool{f.Key: true}}
				return decided[id]
			}
			return deny(id, fmt.Sprintf("Dependency copying isn't available because flag '%s' is disabled in the target project. "+
				"Copy this flag without dependencies to leave that target flag unchanged.", f.Key))
		}
		d := dependencyDecision{ok: true, copy: map[string]bool{}, reused: map[string]bool{}}
		for _, child := range src.edges[id] {
			c := decide(child)
			d.ok = d.ok && c.ok
			for k := range c.copy {
				d.copy[k] = true
			}
			for k := range c.reused {
				d.reused[k] = true
			}
		}
		if !d.ok {
			return deny(id, "")
		}
		d.copy[f.Key] = true
		decided[id] = d
		return d
	}
	copied, reused = map[string]bool{}, map[string]bool{}
	for _, id := range src.roots {
		d := decide(id)
		for k := range d.copy {
			copied[k] = true
		}
		for k := range d.reused {
			reused[k] = true
		}
	}
	return copied, reused, warnings
}

// graphKeys are the keys of the root and its dependencies.
func (src *copySource) graphKeys() []string {
	keys := []string{src.root.Key}
	for _, f := range src.deps {
		keys = append(keys, f.Key)
	}
	return keys
}

// readTargetFlags reads the flags of the target project with the keys, by key.
func readTargetFlags(ctx context.Context, q dbConn, projectID int64, keys []string) (map[string]controlplane.TargetFlag, error) {
	rows, err := q.Query(ctx, `SELECT key, id, active FROM feature_flags WHERE project_id = $1 AND key = ANY($2) AND NOT deleted`, projectID, keys)
	if err != nil {
		return nil, err
	}
	out := map[string]controlplane.TargetFlag{}
	var key string
	var t controlplane.TargetFlag
	_, err = pgx.ForEachRow(rows, []any{&key, &t.ID, &t.Active}, func() error { out[key] = t; return nil })
	return out, err
}

// targetReachable reports whether the project is of the organisation, which the user reaches.
func targetReachable(ctx context.Context, q dbConn, u *controlplane.User, orgID, projectID int64) (bool, error) {
	var projectOrg int64
	err := q.QueryRow(ctx, `SELECT organization_id FROM projects WHERE id = $1`, projectID).Scan(&projectOrg)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil && projectOrg == orgID && controlplane.CanReadOrg(u, projectOrg), err
}

// FindCopyRequirements previews a copy with dependencies, as PostHog's dependency_requirements:
// a source graph that cannot be copied (a cycle, too many flags, a reference to a flag the
// user may not change) is a preview that says so, not an error.
func (s *FlagService) FindCopyRequirements(ctx context.Context, orgID int64, req controlplane.FlagCopyRequest) (*controlplane.CopyRequirements, error) {
	u, err := orgUser(ctx, orgID, controlplane.CanReadOrg)
	if err != nil {
		return nil, err
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	q := s.db.conn(ctx)
	src, err := readCopySource(ctx, q, u, orgID, req)
	if err != nil {
		return nil, opError("copy requirements", err)
	}
	if err := src.resolveGraph(); err != nil {
		var e *controlplane.Error
		if !errors.As(err, &e) {
			return nil, opError("copy requirements", err)
		}
		return controlplane.CopyUnavailable(e.Detail), nil
	}
	copied := map[string]bool{}
	var reused map[string]bool
	unreachable := false
	var warnings []string
	for _, target := range req.TargetProjectIDs {
		if len(src.deps) == 0 {
			break
		}
		ok, err := targetReachable(ctx, q, u, orgID, target)
		if err != nil {
			return nil, opError("copy requirements", err)
		}
		if !ok {
			unreachable = true
			warnings = append(warnings, controlplane.CopyProjectNotFound)
			reused = map[string]bool{}
			continue
		}
		flags, err := readTargetFlags(ctx, q, target, src.graphKeys())
		if err != nil {
			return nil, opError("copy requirements", err)
		}
		c, r, w := src.decideDependencies(flags)
		warnings = append(warnings, w...)
		for k := range c {
			copied[k] = true
		}
		if reused == nil {
			reused = r
		} else {
			for k := range reused {
				if !r[k] {
					delete(reused, k)
				}
			}
		}
	}
	deps := make([]string, len(src.deps))
	for i, f := range src.deps {
		deps[i] = f.Key
	}
	return controlplane.NewCopyRequirements(deps, copied, reused, warnings, unreachable), nil
}

// CreateFlagCopies copies the flag into each target in a transaction of its own: the
// dependencies to copy first, the cohorts each copied flag uses (matched by name, else
// created, static ones with their members), the flag through createFlag or changeFlag (the
// flag service's own writes, with their checks, activity and webhooks), its scheduled
// changes, and one snapshot bump. A refusal there (a domain error) is the target's failure and
// rolls it back (but for what a refusal commits by design: the approval gate's change
// request); any other error ends the call.
func (s *FlagService) CreateFlagCopies(ctx context.Context, orgID int64, req controlplane.FlagCopyRequest) (*controlplane.FlagCopyResult, error) {
	u, err := orgUser(ctx, orgID, controlplane.CanReadOrg)
	if err != nil {
		return nil, err
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	q := s.db.conn(ctx)
	src, err := readCopySource(ctx, q, u, orgID, req)
	if err != nil {
		return nil, opError("copy flag", err)
	}
	if req.CopyDependencies {
		if err := src.resolveGraph(); err != nil {
			return nil, opError("copy flag", err)
		}
	}
	if err := src.readCopyCarriage(ctx, q, req.CopySchedule); err != nil {
		return nil, opError("copy flag", err)
	}
	out := &controlplane.FlagCopyResult{Success: []controlplane.FlagCopy{}, Failed: []controlplane.FlagCopyFailure{}}
	for _, target := range req.TargetProjectIDs {
		ok, err := targetReachable(ctx, q, u, orgID, target)
		if err != nil {
			return nil, opError("copy flag", err)
		}
		if !ok {
			out.Failed = append(out.Failed, controlplane.FlagCopyFailure{ProjectID: target, ErrorMessage: controlplane.CopyProjectNotFound})
			continue
		}
		var copied *controlplane.FlagCopy
		err = s.db.inTx(ctx, func(tx pgx.Tx) error {
			c := &targetCopy{src: src, req: req, tx: tx, u: u, now: s.db.Now(), projectID: target, cohorts: map[int64]int64{}}
			var err error
			copied, err = c.run(ctx)
			return err
		})
		switch {
		case err == nil:
			out.Success = append(out.Success, *copied)
		case controlplane.ErrorKind(err) != controlplane.Internal:
			failure := controlplane.FlagCopyFailure{ProjectID: target, ErrorMessage: failureReason(err)}
			if gated := (*controlplane.ApprovalRequiredError)(nil); errors.As(err, &gated) {
				failure.ChangeRequestID = gated.ChangeRequest.ID
			}
			out.Failed = append(out.Failed, failure)
		default:
			return nil, opError("copy flag", err)
		}
	}
	return out, nil
}

// targetCopy is one target's copy, in its transaction.
type targetCopy struct {
	src       *copySource
	req       controlplane.FlagCopyRequest
	tx        pgx.Tx
	u         *controlplane.User
	now       time.Time
	projectID int64
	// flags are the target's flags of the graph's keys, as the copy leaves them.
	flags map[string]controlplane.TargetFlag
	// cohorts maps the source's cohorts to the target's.
	cohorts map[int64]int64
}

// run makes the copy, then bumps the target's snapshot once. The bump follows a refused write
// too: a refusal that commits what the transaction wrote before it (the approval gate, which
// files a change request) must still bring the dependencies and cohorts copied so far to the
// edges; any other refusal rolls the bump back with the rest.
func (c *targetCopy) run(ctx context.Context) (*controlplane.FlagCopy, error) {
	r, err := c.copyAll(ctx)
	version, bumpErr := bumpSnapshotVersion(ctx, c.tx, c.projectID)
	if err != nil {
		return nil, err
	}
	if bumpErr != nil {
		return nil, bumpErr
	}
	r.Flag.SnapshotVersion = version
	return r, nil
}

// copyAll copies the dependencies the target needs, then the flag.
func (c *targetCopy) copyAll(ctx context.Context) (*controlplane.FlagCopy, error) {
	var err error
	if c.flags, err = readTargetFlags(ctx, c.tx, c.projectID, c.src.graphKeys()); err != nil {
		return nil, err
	}
	var copiedKeys, depWarnings []string
	if len(c.src.deps) > 0 {
		toCopy, _, _ := c.src.decideDependencies(c.flags)
		for _, dep := range c.src.deps {
			if !toCopy[dep.Key] {
				continue
			}
			r, err := c.write(ctx, dep, false)
			if err != nil {
				return nil, err
			}
			copiedKeys = append(copiedKeys, dep.Key)
			depWarnings = append(depWarnings, r.FlagDependencyWarnings...)
			if r.ScheduleCopyWarning != "" {
				depWarnings = append(depWarnings, r.ScheduleCopyWarning)
			}
		}
	}
	r, err := c.write(ctx, c.src.root, true)
	if err != nil {
		return nil, err
	}
	r.CopiedDependencyKeys, r.DependencyCopyWarnings = copiedKeys, depWarnings
	return r, nil
}

// write copies one flag of the source into the target: the root (updating a flag of its key
// there, when the user may change it) or a dependency (which the target lacks).
func (c *targetCopy) write(ctx context.Context, f *sourceFlag, root bool) (*controlplane.FlagCopy, error) {
	cohortIDs := controlplane.CohortReferences(f.Filters)
	for _, s := range c.src.schedules[f.ID] {
		cohortIDs = append(cohortIDs, controlplane.CohortReferences(s.payload)...)
	}
	if err := c.ensureCohorts(ctx, cohortIDs); err != nil {
		return nil, err
	}
	filters, warnings, err := c.remap(ctx, f.Filters)
	if err != nil {
		return nil, err
	}
	active := f.Active && len(warnings) == 0 && !(root && c.req.DisableCopiedFlag)
	deleted := false
	upd := controlplane.FlagUpdate{Key: &f.Key, Name: &f.Name, Filters: filters, Active: &active, Deleted: &deleted,
		EnsureExperienceContinuity: &f.EnsureExperienceContinuity, EvaluationRuntime: &f.EvaluationRuntime,
		BucketingIdentifier: &f.BucketingIdentifier}
	existing, exists := c.flags[f.Key]
	var written *controlplane.Flag
	switch {
	case exists && !root:
		return nil, controlplane.Errorf(controlplane.Invalid, "invalid_input",
			"Dependency flag '%s' already exists in the target project. It was left unchanged.", f.Key)
	case exists:
		before, err := lockFlagForChange(ctx, c.tx, c.u, c.projectID, existing.ID)
		if errors.Is(err, controlplane.ErrPermissionDenied) {
			return nil, &controlplane.Error{Kind: controlplane.Forbidden, Code: "permission_denied", Detail: controlplane.CopyTargetForbidden}
		}
		if err != nil {
			return nil, err
		}
		if written, _, err = changeFlag(ctx, c.tx, c.now, c.u, before, upd); err != nil {
			return nil, err
		}
	default:
		if written, err = createFlag(ctx, c.tx, c.now, c.u, c.projectID, upd); err != nil {
			return nil, err
		}
	}
	c.flags[f.Key] = controlplane.TargetFlag{ID: written.ID, Active: written.Active}
	out := &controlplane.FlagCopy{Flag: written, FlagDependencyWarnings: warnings}
	var scheduleWarnings []string
	if exists {
		var pending bool
		if err := c.tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM scheduled_changes WHERE project_id = $1 AND model_name = $2
			AND record_id = $3 AND executed_at IS NULL)`, c.projectID, controlplane.ModelFeatureFlag, strconv.FormatInt(written.ID, 10)).
			Scan(&pending); err != nil {
			return nil, err
		}
		if pending {
			scheduleWarnings = append(scheduleWarnings, controlplane.CopyExistingScheduleWarning)
		}
	}
	switch {
	case c.req.CopySchedule && len(warnings) > 0:
		scheduleWarnings = append(scheduleWarnings, controlplane.CopySkippedSchedulesWarning)
	case c.req.CopySchedule:
		w, err := c.copySchedules(ctx, f, written.ID)
		if err != nil {
			return nil, err
		}
		scheduleWarnings = append(scheduleWarnings, w...)
	}
	out.ScheduleCopyWarning = controlplane.ScheduleCopyWarning(scheduleWarnings)
	return out, nil
}

// target resolves a key for RemapFlagDependencies: the target's flag of that key, read by
// loadTargets.
func (c *targetCopy) target(key string) (controlplane.TargetFlag, bool) {
	t, ok := c.flags[key]
	return t, ok
}

// loadTargets reads the target's flags of the keys that the flag conditions of raw (filters,
// or a scheduled change's value) name in the source, so that target can answer for them.
func (c *targetCopy) loadTargets(ctx context.Context, raw json.RawMessage) error {
	var keys []string
	for _, ref := range controlplane.FlagReferences(raw) {
		if dep, ok := c.src.dependency(ref); ok {
			if _, known := c.flags[dep.Key]; !known {
				keys = append(keys, dep.Key)
			}
		}
	}
	if len(keys) == 0 {
		return nil
	}
	found, err := readTargetFlags(ctx, c.tx, c.projectID, keys)
	for k, t := range found {
		c.flags[k] = t
	}
	return err
}

// remap rewrites raw's cohorts and flag conditions for the target.
func (c *targetCopy) remap(ctx context.Context, raw json.RawMessage) (json.RawMessage, []string, error) {
	out, err := controlplane.RemapCohorts(raw, c.cohorts)
	if err != nil {
		return nil, nil, err
	}
	if err := c.loadTargets(ctx, out); err != nil {
		return nil, nil, err
	}
	return controlplane.RemapFlagDependencies(out, c.src.dependency, c.target)
}

// ensureCohorts gives each of the source's cohorts ids, and those they use, a cohort of the
// target: the target's cohort of the same name, else a copy (its nested cohorts first, so that
// its filters name the target's; a static one with its members). A cohort the source does not
// have is left out: the reference stays and the flag's checks refuse it.
func (c *targetCopy) ensureCohorts(ctx context.Context, ids []int64) error {
	for _, id := range ids {
		if err := c.ensureCohort(ctx, id, map[int64]bool{}); err != nil {
			return err
		}
	}
	return nil
}

func (c *targetCopy) ensureCohort(ctx context.Context, id int64, visiting map[int64]bool) error {
	src := c.src.cohorts[id]
	if _, done := c.cohorts[id]; done || src == nil || visiting[id] {
		return nil
	}
	visiting[id] = true
	var existing int64
	err := c.tx.QueryRow(ctx, `SELECT id FROM cohorts WHERE project_id = $1 AND name = $2 AND NOT deleted ORDER BY id LIMIT 1`,
		c.projectID, src.name).Scan(&existing)
	if err == nil {
		c.cohorts[id] = existing
		return nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	for _, nested := range controlplane.CohortReferences(src.filters) {
		if err := c.ensureCohort(ctx, nested, visiting); err != nil {
			return err
		}
	}
	filters, err := controlplane.RemapCohorts(src.filters, c.cohorts)
	if err != nil {
		return err
	}
	var created int64
	if err := c.tx.QueryRow(ctx, `INSERT INTO cohorts (project_id, name, description, filters, is_static, created_by)
		VALUES ($1, $2, $3, $4, $5, $6) RETURNING id`, c.projectID, src.name, src.description, filters, src.static, c.u.ID).
		Scan(&created); err != nil {
		return err
	}
	c.cohorts[id] = created
	if src.static {
		return copyCohortMembers(ctx, c.tx, c.src.projectID, id, c.projectID, created)
	}
	return nil
}

// copyCohortMembers makes the members of a static cohort of one project members of a cohort
// of another: each member is the person of the target who has one of the member's distinct
// ids, else a new person of the target (with no properties: those are the target's to learn),
// and gets there those of the member's distinct ids that no one has yet, so that the same
// users are in the cohort on both sides.
func copyCohortMembers(ctx context.Context, tx pgx.Tx, fromProject, fromCohort, toProject, toCohort int64) error {
	_, err := tx.Exec(ctx, `
		WITH src AS (SELECT cp.person_id AS sp, d.distinct_id FROM cohort_people cp
				JOIN person_distinct_ids d ON d.person_id = cp.person_id AND d.project_id = $1
				WHERE cp.cohort_id = $2),
			matched AS (SELECT s.sp, min(t.person_id) AS tp FROM src s
				JOIN person_distinct_ids t ON t.project_id = $3 AND t.distinct_id = s.distinct_id GROUP BY s.sp),
			missing AS (SELECT sp, nextval(pg_get_serial_sequence('persons', 'id')) AS tp
				FROM (SELECT DISTINCT sp FROM src WHERE sp NOT IN (SELECT sp FROM matched)) m),
			created AS (INSERT INTO persons (id, project_id) SELECT tp, $3 FROM missing),
			members AS (SELECT sp, tp FROM matched UNION ALL SELECT sp, tp FROM missing),
			ids AS (INSERT INTO person_distinct_ids (project_id, distinct_id, person_id)
				SELECT $3, s.distinct_id, m.tp FROM src s JOIN members m ON m.sp = s.sp ON CONFLICT DO NOTHING)
		INSERT INTO cohort_people (cohort_id, person_id) SELECT DISTINCT $4::bigint, tp FROM members ON CONFLICT DO NOTHING`,
		fromProject, fromCohort, toProject, toCohort)
	return err
}

// copySchedules copies the source flag's pending scheduled changes to the target's flag, each
// with its cohorts and flag conditions remapped; a change whose flag conditions cannot all be
// remapped is skipped, with the warnings why.
func (c *targetCopy) copySchedules(ctx context.Context, f *sourceFlag, flagID int64) ([]string, error) {
	var warnings []string
	for _, s := range c.src.schedules[f.ID] {
		payload := s.payload
		// A payload that no longer parses is copied as it is: it fails in the target as in the source.
		if p, err := controlplane.ParseScheduledPayload(s.payload); err == nil && p.Operation == controlplane.OpAddReleaseCondition {
			value, w, err := c.remap(ctx, p.Value)
			if err != nil {
				return nil, err
			}
			if len(w) > 0 {
				warnings = append(warnings, w...)
				warnings = append(warnings, controlplane.CopySkippedScheduleWarning)
				continue
			}
			if payload, err = json.Marshal(controlplane.ScheduledPayload{Operation: p.Operation, Value: value}); err != nil {
				return nil, err
			}
		}
		if _, err := insertScheduledChange(ctx, c.tx, c.projectID, flagID, payload, s.scheduledAt, c.u); err != nil {
			return nil, err
		}
	}
	return warnings, nil
}

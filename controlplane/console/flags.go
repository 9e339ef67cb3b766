package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/controlplane/flageval"
	"github.com/flagedge/flagedge/shared/flags"
)

// maxListed bounds the lists a page shows at once (flags, roles, role access records).
const maxListed = 1000

// flagsPage is the flags list.
type flagsPage struct {
	Flags   []flagView
	Search  string
	Status  string
	Total   int
	Deleted []flagView
}

func (c *Console) handleFlags(q *request) error {
	p, err := q.page("Feature flags", "flags")
	if err != nil {
		return err
	}
	list, total, err := q.c.cfg.Flags.FindFlags(q.ctx, controlplane.FlagFilter{ProjectID: p.Project.ID, Limit: maxListed})
	if err != nil {
		return err
	}
	views, err := q.flagViews(list...)
	if err != nil {
		return err
	}
	data := &flagsPage{Search: strings.TrimSpace(q.r.URL.Query().Get("search")), Status: q.r.URL.Query().Get("status"), Total: total}
	needle := strings.ToLower(data.Search)
	for _, f := range views {
		match := needle == "" || strings.Contains(strings.ToLower(f.Key), needle) || strings.Contains(strings.ToLower(f.Name), needle) ||
			strings.Contains(strings.ToLower(strings.Join(f.Tags, " ")), needle)
		switch data.Status {
		case "active":
			match = match && f.Active
		case "inactive":
			match = match && !f.Active
		}
		if match {
			data.Flags = append(data.Flags, f)
		}
	}
	// Recently deleted flags, from the activity log, so they can be restored.
	activity, _, err := q.c.cfg.Activity.FindActivity(q.ctx, controlplane.ActivityFilter{ProjectID: p.Project.ID, Scope: "FeatureFlag", Limit: 30})
	if err == nil {
		seen := map[string]bool{}
		for _, a := range activity {
			if a.Activity != "deleted" || seen[a.ItemID] || len(data.Deleted) >= 5 {
				continue
			}
			seen[a.ItemID] = true
			id, err := strconv.ParseInt(a.ItemID, 10, 64)
			if err != nil {
				continue
			}
			if f, err := q.c.cfg.Flags.FindFlagByID(q.ctx, p.Project.ID, id); err == nil && f.Deleted {
				data.Deleted = append(data.Deleted, flagView{Flag: f})
			}
		}
	}
	p.Data = data
	c.render(q.w, http.StatusOK, "flags", p)
	return nil
}

// flagPage is the create and edit form with the flag's side panels.
type flagPage struct {
	Flag          *flagView
	IsNew         bool
	Key           string
	Description   string
	Active        bool
	Tags          string
	Continuity    bool
	Form          *filterForm
	Operators     any
	PropertyTypes any
	Error         string
	ErrorAttr     string
	CanEdit       bool

	// Usage is the flag's evaluations at the edges: a 30-day sparkline and the totals.
	Usage *usageView

	RoleAccess []roleAccessView
	Roles      []roleView
	// Schedules are the flag's scheduled changes; ScheduleAt is the form's default time.
	Schedules  []scheduleView
	ScheduleAt string
	TestID     string
	TestProps  string
	Test       *testView
}

type blastView struct {
	Index          int
	Affected, All  int
	Percent        string
	Err            string
	GroupAggregate bool
	// Sampled says All is the first blastSample stored, not all of them.
	Sampled bool
}

type testView struct {
	Value          string
	Reason         string
	ConditionIndex *int
	Enabled        bool
	Err            string
}

func newFlagPage() *flagPage {
	return &flagPage{Operators: operators, PropertyTypes: propertyTypes, Active: true, CanEdit: true}
}

func (c *Console) handleNewFlag(q *request) error {
	p, err := q.page("New feature flag", "flags")
	if err != nil {
		return err
	}
	data := newFlagPage()
	data.IsNew = true
	data.Form = &filterForm{Conditions: []conditionForm{{}}}
	p.Data = data
	c.render(q.w, http.StatusOK, "flag", p)
	return nil
}

// flagFromForm reads the form's flag fields into the page.
func flagFromForm(q *request, data *flagPage, rest map[string]json.RawMessage) {
	v := q.r.PostForm
	data.Key = strings.TrimSpace(v.Get("key"))
	data.Description = v.Get("name")
	data.Active = v.Get("active") == "on"
	data.Tags = v.Get("tags")
	data.Continuity = v.Get("ensure_experience_continuity") == "on"
	data.Form = filterFormFrom(v, rest)
}

// applyFormAction handles the form's add/remove buttons, which edit the form without saving;
// it reports whether the action was one of them.
func applyFormAction(f *filterForm, action string) bool {
	num := func(prefix string) (int, bool) {
		n, err := strconv.Atoi(strings.TrimPrefix(action, prefix))
		return n, err == nil && n >= 0 && strings.HasPrefix(action, prefix)
	}
	switch {
	case action == "add_condition":
		f.Conditions = append(f.Conditions, conditionForm{})
	case action == "add_variant":
		if len(f.Variants) == 0 {
			f.Variants = append(f.Variants, variantForm{Key: "control", Rollout: "50"}, variantForm{Key: "test", Rollout: "50"})
		} else {
			f.Variants = append(f.Variants, variantForm{})
		}
	case strings.HasPrefix(action, "add_property_"):
		if i, ok := num("add_property_"); ok && i < len(f.Conditions) {
			f.Conditions[i].Properties = append(f.Conditions[i].Properties, propertyForm{Operator: "exact", Type: "person"})
		}
	case strings.HasPrefix(action, "remove_condition_"):
		if i, ok := num("remove_condition_"); ok && i < len(f.Conditions) {
			f.Conditions = append(f.Conditions[:i], f.Conditions[i+1:]...)
		}
	case strings.HasPrefix(action, "remove_variant_"):
		if i, ok := num("remove_variant_"); ok && i < len(f.Variants) {
			f.Variants = append(f.Variants[:i], f.Variants[i+1:]...)
		}
	default:
		return false
	}
	return true
}

// flagUpdate is the form's flag as an update of every field the form has.
func flagUpdate(data *flagPage) (controlplane.FlagUpdate, error) {
	filters, err := data.Form.filters()
	if err != nil {
		return controlplane.FlagUpdate{}, err
	}
	tags := []string{}
	for _, t := range strings.Split(data.Tags, ",") {
		if t = strings.TrimSpace(t); t != "" {
			tags = append(tags, t)
		}
	}
	return controlplane.FlagUpdate{Key: &data.Key, Name: &data.Description, Active: &data.Active, Tags: &tags,
		EnsureExperienceContinuity: &data.Continuity, Filters: filters}, nil
}

// showFormError re-renders the form with the error of a failed save.
func (c *Console) showFormError(q *request, p *page, data *flagPage, err error) error {
	e := invalid(err)
	if e == nil {
		return err
	}
	data.Error, data.ErrorAttr = e.Detail, e.Attr
	p.Data = data
	c.render(q.w, http.StatusBadRequest, "flag", p)
	return nil
}

func (c *Console) handleCreateFlag(q *request) error {
	p, err := q.page("New feature flag", "flags")
	if err != nil {
		return err
	}
	data := newFlagPage()
	data.IsNew = true
	flagFromForm(q, data, nil)
	if applyFormAction(data.Form, q.r.PostFormValue("action")) {
		p.Data = data
		c.render(q.w, http.StatusOK, "flag", p)
		return nil
	}
	upd, err := flagUpdate(data)
	if err != nil {
		return c.showFormError(q, p, data, err)
	}
	created, err := q.c.cfg.Flags.CreateFlag(q.ctx, p.Project.ID, upd)
	if q.heldForReview(err) {
		return nil
	}
	if err != nil {
		return c.showFormError(q, p, data, err)
	}
	return q.redirect(livePath(q.projectPath("/feature_flags/%d", created.ID), created.SnapshotVersion), "success", "Feature flag "+created.Key+" created.")
}

// objectIDs are the path's project id and the id of the object of the project it names (a
// flag, a webhook, a destination): the services say whether the user reaches them.
func (q *request) objectIDs() (projectID, id int64, err error) {
	if projectID, err = pathID(q.r, "pid"); err != nil {
		return 0, 0, err
	}
	id, err = pathID(q.r, "id")
	return projectID, id, err
}

// findFlag reads the path's flag.
func (q *request) findFlag() (*controlplane.Flag, error) {
	pid, id, err := q.objectIDs()
	if err != nil {
		return nil, err
	}
	return q.c.cfg.Flags.FindFlagByID(q.ctx, pid, id)
}

// loadFlag reads the path's flag to show it (flagView).
func (q *request) loadFlag() (*flagView, error) {
	f, err := q.findFlag()
	if err != nil {
		return nil, err
	}
	return q.flagView(f)
}

// flagView is a flag read by FindFlagByID, which tells whether the user may change it, with
// its usage.
func (q *request) flagView(f *controlplane.Flag) (*flagView, error) {
	views := []flagView{{Flag: f, CanEdit: f.CanEdit}}
	if err := q.addUsage(f.ProjectID, views); err != nil {
		return nil, err
	}
	return &views[0], nil
}

// flagViews are the flags with whether the user may change each.
func (q *request) flagViews(list ...*controlplane.Flag) ([]flagView, error) {
	ids := make([]int64, len(list))
	for i, f := range list {
		ids[i] = f.ID
	}
	editable, err := q.c.cfg.Roles.EditableFlags(q.ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make([]flagView, len(list))
	for i, f := range list {
		out[i] = flagView{Flag: f, CanEdit: editable[f.ID]}
	}
	if len(list) > 0 {
		if err := q.addUsage(list[0].ProjectID, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (c *Console) handleFlag(q *request) error {
	f, err := q.loadFlag()
	if err != nil {
		return err
	}
	p, err := q.page(f.Key, "flags")
	if err != nil {
		return err
	}
	data := newFlagPage()
	data.Flag, data.Key, data.Description, data.Active = f, f.Key, f.Name, f.Active
	data.Tags, data.Continuity, data.CanEdit = strings.Join(f.Tags, ", "), f.EnsureExperienceContinuity, f.CanEdit
	if data.Form, err = parseFilterForm(f.Filters); err != nil {
		return err
	}
	c.flagPanels(q, f, data)
	p.Data = data
	c.render(q.w, http.StatusOK, "flag", p)
	return nil
}

// flagPanels fills the usage, role access, schedules and test panels of a saved flag; the
// blast radius panel, which scans stored persons, loads after the page (handleFlagBlast).
func (c *Console) flagPanels(q *request, f *flagView, data *flagPage) {
	data.Usage = q.usage(f)
	data.Schedules = flagSchedules(q, f)
	data.ScheduleAt = time.Now().UTC().Add(time.Hour).Truncate(time.Minute).Format(dateLocal)
	if access, _, err := q.c.cfg.Roles.FindRoleAccess(q.ctx, f.ProjectID, f.ID, maxListed, 0); err == nil {
		for _, a := range access {
			data.RoleAccess = append(data.RoleAccess, roleAccessView{RoleAccess: a, Role: roleView{&a.Role}})
		}
	}
	if roles, _, err := q.c.cfg.Roles.FindRoles(q.ctx, q.user().OrganizationID, maxListed, 0); err == nil {
		for _, r := range roles {
			data.Roles = append(data.Roles, roleView{r})
		}
	}
	data.TestID = strings.TrimSpace(q.r.URL.Query().Get("distinct_id"))
	data.TestProps = q.r.URL.Query().Get("properties")
	if data.TestID != "" {
		data.Test = evaluate(q, f, data.TestID, data.TestProps)
	}
}

// blastPanel is the fragment handleFlagBlast answers: the reach of each of a flag's
// conditions.
type blastPanel struct {
	Blast []blastView
}

// handleFlagBlast answers the flag page's "who would get it" panel, the HTML fragment that
// console.js puts in place of the page's data-fragment placeholder once the page has
// rendered, so that the page does not wait for the scan of stored persons; without
// JavaScript the placeholder's link shows it alone. The conditions are the stored flag's.
func (c *Console) handleFlagBlast(q *request) error {
	f, err := q.findFlag()
	if err != nil {
		return err
	}
	if f.Deleted {
		return controlplane.ErrNotFound // deleted flags have no panel: they are never evaluated
	}
	form, err := parseFilterForm(f.Filters)
	if err != nil {
		return err
	}
	var gti *int
	if form.GroupTypeIndex != "" {
		i, _ := strconv.Atoi(form.GroupTypeIndex)
		gti = &i
	}
	var raw struct {
		Groups []json.RawMessage `json:"groups"`
	}
	_ = json.Unmarshal(f.Filters, &raw)
	if len(raw.Groups) > maxBlastConditions {
		raw.Groups = raw.Groups[:maxBlastConditions]
	}
	var panel blastPanel
	radii, err := q.blastRadii(f.ProjectID, raw.Groups, gti, f.Key)
	for i := range raw.Groups {
		b := blastView{Index: i + 1, GroupAggregate: gti != nil}
		if err == nil {
			err := radii.Errs[i]
			b.Affected, b.All, b.Sampled = radii.Affected[i], radii.Total, !radii.Complete
			if err != nil {
				b.Err = q.c.detail(q.r, err)
			}
		} else {
			b.Err = q.c.detail(q.r, err)
		}
		if b.All > 0 {
			b.Percent = strconv.FormatFloat(100*float64(b.Affected)/float64(b.All), 'f', 1, 64)
		}
		panel.Blast = append(panel.Blast, b)
	}
	var buf bytes.Buffer
	if err := c.pages["flag"].ExecuteTemplate(&buf, "blast", &panel); err != nil {
		return err
	}
	h := q.w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	_, _ = q.w.Write(buf.Bytes()) // the client went away; nothing to do
	return nil
}

// maxBlastConditions and blastSample bound the "who would get it" panel: ten conditions are
// plenty for a page, and one scan of at most 10,000 stored persons (or groups) counts all of
// them, so that a page costs the same whatever the number of persons stored.
const (
	maxBlastConditions = 10
	blastSample        = 10000
)

// blastRadii counts the reach of a flag's conditions over the first blastSample stored
// persons (or groups), in one scan.
func (q *request) blastRadii(projectID int64, conditions []json.RawMessage, gti *int, flagKey string) (*flageval.Radii, error) {
	compiled, err := q.c.cfg.Evaluator.Compile(q.ctx, projectID)
	if err != nil {
		return nil, err
	}
	return q.c.cfg.Evaluator.BlastRadii(q.ctx, compiled, conditions, gti, flagKey, blastSample)
}

// evaluate finds why the flag has its value for a distinct id and properties.
func evaluate(q *request, f *flagView, distinctID, props string) *testView {
	t := &testView{}
	req := flags.Request{DistinctID: distinctID}
	if strings.TrimSpace(props) != "" {
		m, err := parseProperties(props)
		if err != nil {
			t.Err = err.Error()
			return t
		}
		req.PersonProperties = m
	}
	compiled, err := q.c.cfg.Evaluator.Compile(q.ctx, f.ProjectID)
	if err != nil {
		t.Err = q.c.detail(q.r, err)
		return t
	}
	results, err := q.c.cfg.Evaluator.ForRequest(q.ctx, compiled, req)
	if err != nil {
		t.Err = q.c.detail(q.r, err)
		return t
	}
	for i := range results {
		res := &results[i]
		if res.Key != f.Key {
			continue
		}
		value := res.Value()
		t.Value = jsonText(value)
		t.Enabled = value != false
		t.Reason = strings.ReplaceAll(res.Reason.String(), "_", " ")
		if res.ConditionIndex >= 0 {
			idx := res.ConditionIndex
			t.ConditionIndex = &idx
		}
		return t
	}
	t.Err = "The flag is not evaluated (deleted flags never are)."
	return t
}

// parseProperties reads test properties: a JSON object, or key=value lines.
func parseProperties(s string) (map[string]any, error) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "{") {
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			return nil, fmt.Errorf("the properties are not a valid JSON object: %v", err)
		}
		return m, nil
	}
	m := map[string]any{}
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("write one key=value per line (%q has no =)", line)
		}
		m[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return m, nil
}

// handleSaveFlag saves the form. The flag is read once, for the stored filters the form
// leaves as they are, and then locked by the update, which decides whether the user may
// change it; what only showing the form again needs (the page, the flag's usage and panels)
// is read only then.
func (c *Console) handleSaveFlag(q *request) error {
	f, err := q.findFlag()
	if err != nil {
		return err
	}
	stored, err := parseFilterForm(f.Filters)
	if err != nil {
		return err
	}
	data := newFlagPage()
	flagFromForm(q, data, stored.rest)
	var saveErr error
	if !applyFormAction(data.Form, q.r.PostFormValue("action")) {
		upd, err := flagUpdate(data)
		if err == nil {
			var saved *controlplane.Flag
			if saved, err = q.c.cfg.Flags.UpdateFlag(q.ctx, f.ProjectID, f.ID, upd); err == nil {
				return q.redirect(livePath(q.projectPath("/feature_flags/%d", f.ID), saved.SnapshotVersion), "success", "Feature flag "+data.Key+" saved.")
			}
			if q.heldForReview(err) {
				return nil
			}
		}
		if controlplane.ErrorKind(err) == controlplane.Forbidden {
			return err
		}
		saveErr = err
	}
	view, err := q.flagView(f)
	if err != nil {
		return err
	}
	p, err := q.page(f.Key, "flags")
	if err != nil {
		return err
	}
	data.Flag, data.CanEdit = view, view.CanEdit
	c.flagPanels(q, data.Flag, data)
	if saveErr != nil {
		return c.showFormError(q, p, data, saveErr)
	}
	p.Data = data
	c.render(q.w, http.StatusOK, "flag", p)
	return nil
}

// handleToggleFlag switches a flag on or off from the list.
func (c *Console) handleToggleFlag(q *request) error {
	pid, id, err := q.objectIDs()
	if err != nil {
		return err
	}
	vals := q.r.PostForm["active"]
	on := len(vals) > 0 && vals[len(vals)-1] == "true"
	saved, err := q.c.cfg.Flags.UpdateFlag(q.ctx, pid, id, controlplane.FlagUpdate{Active: &on})
	if q.heldForReview(err) {
		return nil
	}
	if err != nil {
		return err
	}
	state := "off"
	if on {
		state = "on"
	}
	back := q.projectPath("/feature_flags")
	if next := q.r.PostFormValue("next"); strings.HasPrefix(next, "/project/") {
		back = next
	}
	return q.redirect(livePath(back, saved.SnapshotVersion), "success", "Feature flag "+saved.Key+" is now "+state+".")
}

// handleDeleteFlag soft-deletes or restores a flag.
func (c *Console) handleDeleteFlag(deleted bool) sessionHandler {
	return func(q *request) error {
		pid, id, err := q.objectIDs()
		if err != nil {
			return err
		}
		saved, err := q.c.cfg.Flags.UpdateFlag(q.ctx, pid, id, controlplane.FlagUpdate{Deleted: &deleted})
		if err != nil {
			if e := invalid(err); e != nil {
				return q.redirect(q.projectPath("/feature_flags/%d", id), "error", e.Detail)
			}
			return err
		}
		if deleted {
			return q.redirect(q.projectPath("/feature_flags/%d", id), "success", "Feature flag "+saved.Key+" deleted. You can restore it from this page.")
		}
		return q.redirect(q.projectPath("/feature_flags/%d", id), "success", "Feature flag "+saved.Key+" restored.")
	}
}

func (c *Console) handleAddRoleAccess(q *request) error {
	pid, id, err := q.objectIDs()
	if err != nil {
		return err
	}
	_, err = q.c.cfg.Roles.CreateRoleAccess(q.ctx, pid, id, q.r.PostFormValue("role_id"))
	if e := invalid(err); e != nil {
		return q.redirect(q.projectPath("/feature_flags/%d#access", id), "error", e.Detail)
	}
	if err != nil {
		return err
	}
	return q.redirect(q.projectPath("/feature_flags/%d#access", id), "success", "Role access granted.")
}

func (c *Console) handleRemoveRoleAccess(q *request) error {
	pid, id, err := q.objectIDs()
	if err != nil {
		return err
	}
	aid, err := pathID(q.r, "aid")
	if err != nil {
		return err
	}
	if err := q.c.cfg.Roles.DeleteRoleAccess(q.ctx, pid, id, aid); err != nil {
		return err
	}
	return q.redirect(q.projectPath("/feature_flags/%d#access", id), "success", "Role access removed.")
}

// activityPage is a flag's activity log.
type activityPage struct {
	Flag    *flagView
	Entries []activityEntry
	Total   int
}

type changeView struct {
	Field, Action string
	Before, After string
	Lines         []diffLine // for structured values: a line diff of their JSON
}

func (c *Console) handleFlagActivity(q *request) error {
	f, err := q.loadFlag()
	if err != nil {
		return err
	}
	p, err := q.page(f.Key+" · activity", "flags")
	if err != nil {
		return err
	}
	list, total, err := q.c.cfg.Activity.FindActivity(q.ctx, controlplane.ActivityFilter{ProjectID: f.ProjectID, Scope: "FeatureFlag",
		ItemID: strconv.FormatInt(f.ID, 10), Limit: 100})
	if err != nil {
		return err
	}
	data := &activityPage{Flag: f, Total: total}
	for _, a := range list {
		data.Entries = append(data.Entries, newActivityEntry(a))
	}
	p.Data = data
	c.render(q.w, http.StatusOK, "activity", p)
	return nil
}

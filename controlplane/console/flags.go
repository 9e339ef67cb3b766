package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

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
	var list listOf[flagView]
	if err := q.api("GET", q.apiProject("/feature_flags/?limit=1000"), nil, &list); err != nil {
		return err
	}
	data := &flagsPage{Search: strings.TrimSpace(q.r.URL.Query().Get("search")), Status: q.r.URL.Query().Get("status"), Total: list.Count}
	needle := strings.ToLower(data.Search)
	for _, f := range list.Results {
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
	var activity struct {
		Results []activityView `json:"results"`
	}
	if err := q.api("GET", q.apiProject("/feature_flags/activity/?limit=30"), nil, &activity); err == nil {
		seen := map[string]bool{}
		for _, a := range activity.Results {
			if a.Activity != "deleted" || seen[a.ItemID] || len(data.Deleted) >= 5 {
				continue
			}
			seen[a.ItemID] = true
			var f flagView
			if q.api("GET", q.apiProject("/feature_flags/%s/", url.PathEscape(a.ItemID)), nil, &f) == nil && f.Deleted {
				data.Deleted = append(data.Deleted, f)
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
	Blast      []blastView
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

// flagFromForm reads the form's flag fields into the page and the API body.
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
		return n, err == nil && strings.HasPrefix(action, prefix)
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

// flagBody is the API body for the form's flag.
func flagBody(data *flagPage) (map[string]any, error) {
	filters, err := data.Form.filters()
	if err != nil {
		return nil, err
	}
	tags := []string{}
	for _, t := range strings.Split(data.Tags, ",") {
		if t = strings.TrimSpace(t); t != "" {
			tags = append(tags, t)
		}
	}
	return map[string]any{"key": data.Key, "name": data.Description, "active": data.Active, "tags": tags,
		"ensure_experience_continuity": data.Continuity, "filters": json.RawMessage(filters)}, nil
}

// showFormError re-renders the form with the error of a failed save.
func (c *Console) showFormError(q *request, p *page, data *flagPage, err error) error {
	if fe, ok := err.(*formError); ok {
		data.Error, data.ErrorAttr = fe.Detail, fe.Attr
	} else if ae := asAPIError(err); ae != nil && ae.Status == http.StatusBadRequest {
		data.Error, data.ErrorAttr = ae.Detail, ae.field()
	} else {
		return err
	}
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
	body, err := flagBody(data)
	if err != nil {
		return c.showFormError(q, p, data, err)
	}
	var created flagView
	header, err := q.apiCall("POST", q.apiProject("/feature_flags/"), body, &created, http.StatusOK)
	if err != nil {
		return c.showFormError(q, p, data, err)
	}
	return q.redirect(livePath(q.projectPath("/feature_flags/%d", created.ID), header), "success", "Feature flag "+created.Key+" created.")
}

// loadFlag reads the path's flag through the API.
func (q *request) loadFlag() (*flagView, error) {
	id, err := strconv.ParseInt(q.r.PathValue("id"), 10, 64)
	if err != nil {
		return nil, &apiError{Status: http.StatusNotFound, Detail: "Not found."}
	}
	var f flagView
	if err := q.api("GET", q.apiProject("/feature_flags/%d/", id), nil, &f); err != nil {
		return nil, err
	}
	return &f, nil
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

// flagPanels fills the usage, role access, blast radius and test panels of a saved flag.
func (c *Console) flagPanels(q *request, f *flagView, data *flagPage) {
	data.Usage = q.usage(f)
	var access listOf[roleAccessView]
	if err := q.api("GET", q.apiProject("/feature_flags/%d/role_access/", f.ID), nil, &access); err == nil {
		data.RoleAccess = access.Results
	}
	var roles listOf[roleView]
	if err := q.api("GET", "/api/organizations/@current/roles/?limit=1000", nil, &roles); err == nil {
		data.Roles = roles.Results
	}
	if !f.Deleted {
		var gti any
		if data.Form.GroupTypeIndex != "" {
			gti, _ = strconv.Atoi(data.Form.GroupTypeIndex)
		}
		var raw struct {
			Groups []json.RawMessage `json:"groups"`
		}
		_ = json.Unmarshal(f.Filters, &raw)
		for i, cond := range raw.Groups {
			b := blastView{Index: i + 1, GroupAggregate: gti != nil}
			var out struct {
				Affected int `json:"users_affected"`
				Total    int `json:"total_users"`
			}
			if err := q.api("POST", q.apiProject("/feature_flags/user_blast_radius/"), map[string]any{
				"condition": cond, "group_type_index": gti, "key": f.Key}, &out); err != nil {
				b.Err = err.Error()
				if ae := asAPIError(err); ae != nil {
					b.Err = ae.Detail
				}
			}
			b.Affected, b.All = out.Affected, out.Total
			if out.Total > 0 {
				b.Percent = strconv.FormatFloat(100*float64(out.Affected)/float64(out.Total), 'f', 1, 64)
			}
			data.Blast = append(data.Blast, b)
			if i == 9 {
				break // ten conditions are plenty for a page
			}
		}
	}
	data.TestID = strings.TrimSpace(q.r.URL.Query().Get("distinct_id"))
	data.TestProps = q.r.URL.Query().Get("properties")
	if data.TestID != "" {
		data.Test = evaluate(q, f.Key, data.TestID, data.TestProps)
	}
}

// evaluate asks the API why the flag has its value for a distinct id and properties.
func evaluate(q *request, key, distinctID, props string) *testView {
	t := &testView{}
	params := url.Values{"distinct_id": {distinctID}}
	if strings.TrimSpace(props) != "" {
		m, err := parseProperties(props)
		if err != nil {
			t.Err = err.Error()
			return t
		}
		b, _ := json.Marshal(m)
		params.Set("person_properties", string(b))
	}
	var out map[string]struct {
		Value      any `json:"value"`
		Evaluation struct {
			Reason         string `json:"reason"`
			ConditionIndex *int   `json:"condition_index"`
		} `json:"evaluation"`
	}
	if err := q.api("GET", q.apiProject("/feature_flags/evaluation_reasons/?%s", params.Encode()), nil, &out); err != nil {
		t.Err = err.Error()
		if ae := asAPIError(err); ae != nil {
			t.Err = ae.Detail
		}
		return t
	}
	res, ok := out[key]
	if !ok {
		t.Err = "The flag is not evaluated (deleted flags never are)."
		return t
	}
	t.Value = jsonText(res.Value)
	t.Enabled = res.Value != false
	t.Reason = strings.ReplaceAll(res.Evaluation.Reason, "_", " ")
	t.ConditionIndex = res.Evaluation.ConditionIndex
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

func (c *Console) handleSaveFlag(q *request) error {
	f, err := q.loadFlag()
	if err != nil {
		return err
	}
	p, err := q.page(f.Key, "flags")
	if err != nil {
		return err
	}
	stored, err := parseFilterForm(f.Filters)
	if err != nil {
		return err
	}
	data := newFlagPage()
	data.Flag, data.CanEdit = f, f.CanEdit
	flagFromForm(q, data, stored.rest)
	if applyFormAction(data.Form, q.r.PostFormValue("action")) {
		c.flagPanels(q, f, data)
		p.Data = data
		c.render(q.w, http.StatusOK, "flag", p)
		return nil
	}
	body, err := flagBody(data)
	var header http.Header
	if err == nil {
		header, err = q.apiCall("PATCH", q.apiProject("/feature_flags/%d/", f.ID), body, nil, http.StatusOK)
	}
	if err != nil {
		if ae := asAPIError(err); ae != nil && ae.Status == http.StatusForbidden {
			return err
		}
		c.flagPanels(q, f, data)
		return c.showFormError(q, p, data, err)
	}
	return q.redirect(livePath(q.projectPath("/feature_flags/%d", f.ID), header), "success", "Feature flag "+data.Key+" saved.")
}

// handleToggleFlag switches a flag on or off from the list.
func (c *Console) handleToggleFlag(q *request) error {
	f, err := q.loadFlag()
	if err != nil {
		return err
	}
	vals := q.r.PostForm["active"]
	on := len(vals) > 0 && vals[len(vals)-1] == "true"
	header, err := q.apiCall("PATCH", q.apiProject("/feature_flags/%d/", f.ID), map[string]any{"active": on}, nil, http.StatusOK)
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
	return q.redirect(livePath(back, header), "success", "Feature flag "+f.Key+" is now "+state+".")
}

// handleDeleteFlag soft-deletes or restores a flag.
func (c *Console) handleDeleteFlag(deleted bool) sessionHandler {
	return func(q *request) error {
		f, err := q.loadFlag()
		if err != nil {
			return err
		}
		if err := q.api("PATCH", q.apiProject("/feature_flags/%d/", f.ID), map[string]any{"deleted": deleted}, nil); err != nil {
			if ae := asAPIError(err); ae != nil && ae.Status == http.StatusBadRequest {
				return q.redirect(q.projectPath("/feature_flags/%d", f.ID), "error", ae.Detail)
			}
			return err
		}
		if deleted {
			return q.redirect(q.projectPath("/feature_flags/%d", f.ID), "success", "Feature flag "+f.Key+" deleted. You can restore it from this page.")
		}
		return q.redirect(q.projectPath("/feature_flags/%d", f.ID), "success", "Feature flag "+f.Key+" restored.")
	}
}

func (c *Console) handleAddRoleAccess(q *request) error {
	f, err := q.loadFlag()
	if err != nil {
		return err
	}
	err = q.api("POST", q.apiProject("/feature_flags/%d/role_access/", f.ID), map[string]any{"role_id": q.r.PostFormValue("role_id")}, nil)
	if ae := asAPIError(err); ae != nil && ae.Status == http.StatusBadRequest {
		return q.redirect(q.projectPath("/feature_flags/%d#access", f.ID), "error", ae.Detail)
	}
	if err != nil {
		return err
	}
	return q.redirect(q.projectPath("/feature_flags/%d#access", f.ID), "success", "Role access granted.")
}

func (c *Console) handleRemoveRoleAccess(q *request) error {
	f, err := q.loadFlag()
	if err != nil {
		return err
	}
	aid, err := strconv.ParseInt(q.r.PathValue("aid"), 10, 64)
	if err != nil {
		return &apiError{Status: http.StatusNotFound, Detail: "Not found."}
	}
	if err := q.api("DELETE", q.apiProject("/feature_flags/%d/role_access/%d/", f.ID, aid), nil, nil); err != nil {
		return err
	}
	return q.redirect(q.projectPath("/feature_flags/%d#access", f.ID), "success", "Role access removed.")
}

// activityPage is a flag's activity log.
type activityPage struct {
	Flag    *flagView
	Entries []activityEntry
	Total   int
}

type activityEntry struct {
	activityView
	Changes []changeView
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
	var out struct {
		Results    []activityView `json:"results"`
		TotalCount int            `json:"total_count"`
	}
	if err := q.api("GET", q.apiProject("/feature_flags/%d/activity/?limit=100", f.ID), nil, &out); err != nil {
		return err
	}
	data := &activityPage{Flag: f, Total: out.TotalCount}
	for _, a := range out.Results {
		e := activityEntry{activityView: a}
		for _, ch := range a.Detail.Changes {
			e.Changes = append(e.Changes, describeChange(ch.Field, ch.Action, ch.Before, ch.After))
		}
		data.Entries = append(data.Entries, e)
	}
	p.Data = data
	c.render(q.w, http.StatusOK, "activity", p)
	return nil
}

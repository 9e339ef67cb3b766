package console

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// handleHome opens the flags of the current project.
func (c *Console) handleHome(q *request) error {
	p, err := q.page("Home", "")
	if err != nil {
		return err
	}
	if p.Project == nil {
		return q.redirect("/projects", "", "")
	}
	http.Redirect(q.w, q.r, "/project/"+strconv.FormatInt(p.Project.ID, 10)+"/feature_flags", http.StatusSeeOther)
	return nil
}

func (c *Console) handleProjects(q *request) error {
	p, err := q.page("Projects", "projects")
	if err != nil {
		return err
	}
	c.render(q.w, http.StatusOK, "projects", p)
	return nil
}

// handleSwitch opens another project (the project picker's form).
func (c *Console) handleSwitch(q *request) error {
	id, err := strconv.ParseInt(q.r.URL.Query().Get("project"), 10, 64)
	if err != nil {
		return q.redirect("/projects", "", "")
	}
	return q.redirect("/project/"+strconv.FormatInt(id, 10)+"/feature_flags", "", "")
}

// annotationsPage is the annotations list.
type annotationsPage struct {
	Annotations []annotationView
	Search      string
	Total       int
}

func (c *Console) handleAnnotations(q *request) error {
	p, err := q.page("Annotations", "annotations")
	if err != nil {
		return err
	}
	search := strings.TrimSpace(q.r.URL.Query().Get("search"))
	var list listOf[annotationView]
	if err := q.api("GET", q.apiProject("/annotations/?limit=200&search=%s", url.QueryEscape(search)), nil, &list); err != nil {
		return err
	}
	p.Data = &annotationsPage{Annotations: list.Results, Search: search, Total: list.Count}
	c.render(q.w, http.StatusOK, "annotations", p)
	return nil
}

// annotationPage is the annotation form.
type annotationPage struct {
	Annotation *annotationView
	Content    string
	Date       string // datetime-local value, UTC
	Scope      string
	Error      string
	ErrorAttr  string
}

const dateLocal = "2006-01-02T15:04"

func (c *Console) handleNewAnnotation(q *request) error {
	p, err := q.page("New annotation", "annotations")
	if err != nil {
		return err
	}
	p.Data = &annotationPage{Date: time.Now().UTC().Format(dateLocal), Scope: "project"}
	c.render(q.w, http.StatusOK, "annotation", p)
	return nil
}

// annotationBody reads the form into the page and the API body.
func annotationBody(q *request, data *annotationPage) map[string]any {
	data.Content = q.r.PostFormValue("content")
	data.Date = q.r.PostFormValue("date_marker")
	data.Scope = q.r.PostFormValue("scope")
	body := map[string]any{"content": data.Content, "scope": data.Scope, "date_marker": nil}
	if data.Date != "" {
		body["date_marker"] = data.Date
		if t, err := time.Parse(dateLocal, data.Date); err == nil {
			body["date_marker"] = t.UTC().Format(time.RFC3339)
		}
	}
	return body
}

func (c *Console) annotationError(q *request, p *page, data *annotationPage, err error) error {
	ae := asAPIError(err)
	if ae == nil || ae.Status != http.StatusBadRequest {
		return err
	}
	data.Error, data.ErrorAttr = ae.Detail, ae.field()
	p.Data = data
	c.render(q.w, http.StatusBadRequest, "annotation", p)
	return nil
}

func (c *Console) handleCreateAnnotation(q *request) error {
	p, err := q.page("New annotation", "annotations")
	if err != nil {
		return err
	}
	data := &annotationPage{}
	body := annotationBody(q, data)
	if err := q.api("POST", q.apiProject("/annotations/"), body, nil); err != nil {
		return c.annotationError(q, p, data, err)
	}
	return q.redirect(q.projectPath("/annotations"), "success", "Annotation created.")
}

func (q *request) loadAnnotation() (*annotationView, error) {
	id, err := strconv.ParseInt(q.r.PathValue("id"), 10, 64)
	if err != nil {
		return nil, &apiError{Status: http.StatusNotFound, Detail: "Not found."}
	}
	var a annotationView
	if err := q.api("GET", q.apiProject("/annotations/%d/", id), nil, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

func (c *Console) handleAnnotation(q *request) error {
	a, err := q.loadAnnotation()
	if err != nil {
		return err
	}
	p, err := q.page("Annotation", "annotations")
	if err != nil {
		return err
	}
	data := &annotationPage{Annotation: a, Content: a.Content, Scope: a.Scope}
	if a.DateMarker != nil {
		data.Date = a.DateMarker.UTC().Format(dateLocal)
	}
	p.Data = data
	c.render(q.w, http.StatusOK, "annotation", p)
	return nil
}

func (c *Console) handleSaveAnnotation(q *request) error {
	a, err := q.loadAnnotation()
	if err != nil {
		return err
	}
	p, err := q.page("Annotation", "annotations")
	if err != nil {
		return err
	}
	data := &annotationPage{Annotation: a}
	body := annotationBody(q, data)
	if err := q.api("PATCH", q.apiProject("/annotations/%d/", a.ID), body, nil); err != nil {
		return c.annotationError(q, p, data, err)
	}
	return q.redirect(q.projectPath("/annotations"), "success", "Annotation saved.")
}

func (c *Console) handleDeleteAnnotation(q *request) error {
	a, err := q.loadAnnotation()
	if err != nil {
		return err
	}
	if err := q.api("PATCH", q.apiProject("/annotations/%d/", a.ID), map[string]any{"deleted": true}, nil); err != nil {
		return err
	}
	return q.redirect(q.projectPath("/annotations"), "success", "Annotation deleted.")
}

// eventsPage is the recent events table.
type eventsPage struct {
	Events     []eventView
	Event      string
	DistinctID string
	Total      int
}

func (c *Console) handleEvents(q *request) error {
	p, err := q.page("Events", "events")
	if err != nil {
		return err
	}
	data := &eventsPage{Event: q.r.URL.Query().Get("event"), DistinctID: q.r.URL.Query().Get("distinct_id")}
	params := url.Values{"limit": {"100"}}
	if data.Event != "" {
		params.Set("event", data.Event)
	}
	if data.DistinctID != "" {
		params.Set("distinct_id", data.DistinctID)
	}
	var list listOf[eventView]
	if err := q.api("GET", q.apiProject("/events/?%s", params.Encode()), nil, &list); err != nil {
		return err
	}
	data.Events, data.Total = list.Results, list.Count
	p.Data = data
	c.render(q.w, http.StatusOK, "events", p)
	return nil
}

// personsPage is the persons list.
type personsPage struct {
	Persons []personView
	Search  string
	Total   int
}

func (c *Console) handlePersons(q *request) error {
	p, err := q.page("Persons", "persons")
	if err != nil {
		return err
	}
	data := &personsPage{Search: strings.TrimSpace(q.r.URL.Query().Get("search"))}
	var list listOf[personView]
	if err := q.api("GET", q.apiProject("/persons/?limit=100&search=%s", url.QueryEscape(data.Search)), nil, &list); err != nil {
		return err
	}
	data.Persons, data.Total = list.Results, list.Count
	p.Data = data
	c.render(q.w, http.StatusOK, "persons", p)
	return nil
}

// personPage is one person with their properties and recent events.
type personPage struct {
	Person personView
	Events []eventView
}

func (c *Console) handlePerson(q *request) error {
	id, err := strconv.ParseInt(q.r.PathValue("id"), 10, 64)
	if err != nil {
		return &apiError{Status: http.StatusNotFound, Detail: "Not found."}
	}
	p, err := q.page("Person", "persons")
	if err != nil {
		return err
	}
	data := &personPage{}
	if err := q.api("GET", q.apiProject("/persons/%d/", id), nil, &data.Person); err != nil {
		return err
	}
	for _, did := range data.Person.DistinctIDs {
		var list listOf[eventView]
		if err := q.api("GET", q.apiProject("/events/?limit=20&distinct_id=%s", url.QueryEscape(did)), nil, &list); err != nil {
			return err
		}
		data.Events = append(data.Events, list.Results...)
		if len(data.Events) >= 50 {
			break
		}
	}
	p.Data = data
	c.render(q.w, http.StatusOK, "person", p)
	return nil
}

package console

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/flagedge/flagedge/controlplane"
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
	Annotations []*controlplane.Annotation
	Search      string
	Total       int
}

func (c *Console) handleAnnotations(q *request) error {
	p, err := q.page("Annotations", "annotations")
	if err != nil {
		return err
	}
	search := strings.TrimSpace(q.r.URL.Query().Get("search"))
	list, total, err := q.c.cfg.Annotations.FindAnnotations(q.ctx, controlplane.AnnotationFilter{
		ProjectID: p.Project.ID, Search: search, Limit: 200})
	if err != nil {
		return err
	}
	p.Data = &annotationsPage{Annotations: list, Search: search, Total: total}
	c.render(q.w, http.StatusOK, "annotations", p)
	return nil
}

// annotationPage is the annotation form.
type annotationPage struct {
	Annotation *controlplane.Annotation
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

// annotationUpdate reads the form into the page and the update: content, scope and the date
// (the form's local time, taken as UTC, or RFC 3339).
func annotationUpdate(q *request, data *annotationPage) (controlplane.AnnotationUpdate, error) {
	data.Content = q.r.PostFormValue("content")
	data.Date = q.r.PostFormValue("date_marker")
	data.Scope = q.r.PostFormValue("scope")
	upd := controlplane.AnnotationUpdate{Content: &data.Content, Scope: &data.Scope, DateMarkerSet: true}
	if data.Date != "" {
		t, err := time.Parse(dateLocal, data.Date)
		if err != nil {
			if t, err = time.Parse(time.RFC3339, data.Date); err != nil {
				return upd, controlplane.FieldError("date_marker", "invalid_date", "Datetime has wrong format. Use ISO 8601.")
			}
		}
		t = t.UTC()
		upd.DateMarker = &t
	}
	return upd, nil
}

func (c *Console) annotationError(q *request, p *page, data *annotationPage, err error) error {
	e := invalid(err)
	if e == nil {
		return err
	}
	data.Error, data.ErrorAttr = e.Detail, e.Attr
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
	upd, err := annotationUpdate(q, data)
	if err == nil {
		_, err = q.c.cfg.Annotations.CreateAnnotation(q.ctx, p.Project.ID, upd)
	}
	if err != nil {
		return c.annotationError(q, p, data, err)
	}
	return q.redirect(q.projectPath("/annotations"), "success", "Annotation created.")
}

// loadAnnotation reads the path's annotation (of its project, or of the organisation) and
// its project.
func (q *request) loadAnnotation() (*controlplane.Annotation, *controlplane.Project, error) {
	project, err := q.project()
	if err != nil {
		return nil, nil, err
	}
	id, err := pathID(q.r, "id")
	if err != nil {
		return nil, nil, err
	}
	a, err := q.c.cfg.Annotations.FindAnnotationByID(q.ctx, project.ID, id)
	return a, project, err
}

func (c *Console) handleAnnotation(q *request) error {
	a, _, err := q.loadAnnotation()
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
	a, project, err := q.loadAnnotation()
	if err != nil {
		return err
	}
	p, err := q.page("Annotation", "annotations")
	if err != nil {
		return err
	}
	data := &annotationPage{Annotation: a}
	upd, err := annotationUpdate(q, data)
	if err == nil {
		_, err = q.c.cfg.Annotations.UpdateAnnotation(q.ctx, project.ID, a.ID, upd)
	}
	if err != nil {
		return c.annotationError(q, p, data, err)
	}
	return q.redirect(q.projectPath("/annotations"), "success", "Annotation saved.")
}

func (c *Console) handleDeleteAnnotation(q *request) error {
	a, project, err := q.loadAnnotation()
	if err != nil {
		return err
	}
	deleted := true
	if _, err := q.c.cfg.Annotations.UpdateAnnotation(q.ctx, project.ID, a.ID, controlplane.AnnotationUpdate{Deleted: &deleted}); err != nil {
		return err
	}
	return q.redirect(q.projectPath("/annotations"), "success", "Annotation deleted.")
}

// eventsPage is the recent events table.
type eventsPage struct {
	Events     []*controlplane.Event
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
	list, total, err := q.c.cfg.Analytics.FindEvents(q.ctx, controlplane.EventFilter{ProjectID: p.Project.ID, Event: data.Event,
		DistinctID: data.DistinctID, Limit: 100})
	if err != nil {
		return err
	}
	data.Events, data.Total = list, total
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
	list, total, err := q.c.cfg.Analytics.FindPersons(q.ctx, controlplane.PersonFilter{ProjectID: p.Project.ID, Search: data.Search, Limit: 100})
	if err != nil {
		return err
	}
	for _, person := range list {
		data.Persons = append(data.Persons, newPersonView(person))
	}
	data.Total = total
	p.Data = data
	c.render(q.w, http.StatusOK, "persons", p)
	return nil
}

// personPage is one person with their properties and recent events.
type personPage struct {
	Person personView
	Events []*controlplane.Event
}

func (c *Console) handlePerson(q *request) error {
	id, err := pathID(q.r, "id")
	if err != nil {
		return err
	}
	p, err := q.page("Person", "persons")
	if err != nil {
		return err
	}
	person, err := q.c.cfg.Analytics.FindPersonByID(q.ctx, p.Project.ID, id)
	if err != nil {
		return err
	}
	data := &personPage{Person: newPersonView(person)}
	for _, did := range person.DistinctIDs {
		list, _, err := q.c.cfg.Analytics.FindEvents(q.ctx, controlplane.EventFilter{ProjectID: p.Project.ID, DistinctID: did, Limit: 20})
		if err != nil {
			return err
		}
		data.Events = append(data.Events, list...)
		if len(data.Events) >= 50 {
			break
		}
	}
	p.Data = data
	c.render(q.w, http.StatusOK, "person", p)
	return nil
}

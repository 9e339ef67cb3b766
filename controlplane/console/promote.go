package console

import (
	"net/http"
	"net/url"
	"strconv"

	"github.com/flagedge/flagedge/controlplane"
)

// promotePage promotes a flag to other projects of the organisation (PostHog's copy_flags):
// the targets to choose, the options, the preview of the dependencies that would come along
// once targets are chosen, and after the copy its outcome in each target.
type promotePage struct {
	Flag *controlplane.Flag
	// Targets are the organisation's other projects the user reaches; Chosen those ticked.
	Targets          []*controlplane.Project
	Chosen           map[int64]bool
	CopyDependencies bool
	DisableCopies    bool
	CopySchedule     bool
	// Preview is what a copy with dependencies would bring along (nil until asked for).
	Preview *controlplane.CopyRequirements
	// Result is the copy's outcome, with the projects' names.
	Result *controlplane.FlagCopyResult
	Names  map[int64]string
	Error  string
}

// promoteForm reads the targets and options of the promote form.
func promoteForm(v url.Values, data *promotePage) []int64 {
	var targets []int64
	for _, s := range v["targets"] {
		if id, err := strconv.ParseInt(s, 10, 64); err == nil && !data.Chosen[id] {
			targets = append(targets, id)
			data.Chosen[id] = true
		}
	}
	data.CopyDependencies = v.Get("copy_dependencies") == "on"
	data.DisableCopies = v.Get("disable_copied_flag") == "on"
	data.CopySchedule = v.Get("copy_schedule") == "on"
	return targets
}

// renderPromote shows the promote page of the path's flag.
func (c *Console) renderPromote(q *request, status int, data *promotePage) error {
	f, err := q.findFlag()
	if err != nil {
		return err
	}
	p, err := q.page(f.Key+" · promote", "flags")
	if err != nil {
		return err
	}
	data.Flag, data.Names = f, map[int64]string{}
	for _, proj := range p.Projects {
		data.Names[proj.ID] = proj.Name
		if proj.ID != f.ProjectID {
			data.Targets = append(data.Targets, proj)
		}
	}
	p.Data = data
	c.render(q.w, status, "promote", p)
	return nil
}

// handlePromote shows the promote form.
func (c *Console) handlePromote(q *request) error {
	return c.renderPromote(q, http.StatusOK, &promotePage{Chosen: map[int64]bool{}})
}

// handleCreatePromotion answers the promote form: its Preview button shows which flags a
// copy with dependencies would bring along into the chosen projects (writing nothing); its
// Promote button copies the flag into them and shows the outcome in each: copied, refused,
// or held for approval by the target's policy.
func (c *Console) handleCreatePromotion(q *request) error {
	f, err := q.findFlag()
	if err != nil {
		return err
	}
	data := &promotePage{Chosen: map[int64]bool{}}
	req := controlplane.FlagCopyRequest{FeatureFlagKey: f.Key, SourceProjectID: f.ProjectID, TargetProjectIDs: promoteForm(q.r.PostForm, data),
		CopySchedule: data.CopySchedule, DisableCopiedFlag: data.DisableCopies, CopyDependencies: data.CopyDependencies}
	if q.r.PostFormValue("op") == "preview" {
		data.Preview, err = c.cfg.FlagCopies.FindCopyRequirements(q.ctx, q.user().OrganizationID, req)
	} else {
		data.Result, err = c.cfg.FlagCopies.CreateFlagCopies(q.ctx, q.user().OrganizationID, req)
	}
	if err != nil {
		e := invalid(err)
		if e == nil {
			return err
		}
		data.Preview, data.Result, data.Error = nil, nil, e.Detail
		return c.renderPromote(q, http.StatusBadRequest, data)
	}
	return c.renderPromote(q, http.StatusOK, data)
}

package posthogimport

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/flagedge/flagedge/controlplane/flagsascode"
)

// Target is the flagedge project an import writes to: the flags as code client for flags,
// cohorts and features, and the same API, key and project for annotations and static
// cohorts' members.
type Target struct {
	Client  *flagsascode.Client
	URL     string
	Key     string
	Project string
	// HTTP sends the requests made here (annotations, members); nil is http.DefaultClient.
	HTTP *http.Client
	// OnMembers, when set, is told how the copy of a static cohort's members goes, after
	// every page read and every batch written.
	OnMembers func(MembersProgress)
}

// Summary is what an import did.
type Summary struct {
	Translation *Translation
	// Result is Apply's (nil on a dry run).
	Result *flagsascode.Result
	// Plan is what the import would change (a dry run's answer; Result.Plan otherwise).
	Plan *flagsascode.Plan
	// AnnotationsCreated are the annotations written (on a dry run: that would be).
	AnnotationsCreated int
	// AnnotationsSkipped are the source's annotations not imported, with why.
	AnnotationsSkipped []string
	// Members is what the copy of static cohorts' members did (nothing on a dry run).
	Members MembersCopied
	// StaticMembers counts, on a dry run, the members the source's static cohorts hold (by
	// their counts): those the import would copy.
	StaticMembers int
}

// Import reads the source project, translates it and, unless dryRun, applies it to the
// target: the cohorts first (through flagsascode.Apply), then the members of the static
// ones (copyMembers), then the flags and early access features (Apply again), so that no
// flag using a static cohort is served before its members are there; then the annotations
// the target lacks. Every step leaves alone what already matches, so a re-run changes
// nothing and an interrupted import run again completes without duplicates; gated changes
// come back as change requests. Nothing is deleted from the target.
func Import(ctx context.Context, src *Source, dst Target, dryRun bool) (*Summary, error) {
	p, err := src.Read(ctx)
	if err != nil {
		return nil, err
	}
	t, err := Translate(p)
	if err != nil {
		return nil, err
	}
	s := &Summary{Translation: t}
	if dryRun {
		if s.Plan, err = flagsascode.NewPlan(ctx, dst.Client, t.State, false); err != nil {
			return s, err
		}
		for _, co := range p.Cohorts {
			if co.IsStatic && !co.Deleted && co.Count != nil {
				s.StaticMembers += *co.Count
			}
		}
		return s, importAnnotations(ctx, dst, p.Annotations, dryRun, s)
	}
	cohorts := flagsascode.NewState()
	cohorts.Cohorts = t.State.Cohorts
	first, err := flagsascode.Apply(ctx, dst.Client, cohorts, false)
	s.Result, s.Plan = first, planOf(first)
	if err != nil {
		return s, err
	}
	if err := copyMembers(ctx, src, dst, p, cohortNames(p.Cohorts), &s.Members); err != nil {
		return s, err
	}
	rest, err := flagsascode.Apply(ctx, dst.Client, t.State, false)
	if rest != nil {
		s.Result = &flagsascode.Result{Plan: &flagsascode.Plan{Changes: append(first.Plan.Changes, rest.Plan.Changes...)},
			Applied: append(first.Applied, rest.Applied...), Gated: append(first.Gated, rest.Gated...), Version: rest.Version}
		s.Plan = s.Result.Plan
	}
	if err != nil {
		return s, err
	}
	return s, importAnnotations(ctx, dst, p.Annotations, dryRun, s)
}

// planOf is r's plan, nil without a result.
func planOf(r *flagsascode.Result) *flagsascode.Plan {
	if r == nil {
		return nil
	}
	return r.Plan
}

// annotationKey identifies an annotation across the two systems: its text, instant and scope.
func annotationKey(content string, marker *string, scope string) string {
	m := ""
	if marker != nil {
		if t, err := time.Parse(time.RFC3339Nano, *marker); err == nil {
			m = t.UTC().Format(time.RFC3339Nano)
		} else {
			m = *marker
		}
	}
	return content + "\x00" + m + "\x00" + scope
}

// importAnnotations creates the project- and organisation-wide annotations the target lacks
// (dashboard and recording annotations name objects flagedge does not have: they are
// skipped and said so).
func importAnnotations(ctx context.Context, dst Target, anns []Annotation, dryRun bool, s *Summary) error {
	have := map[string]bool{}
	for offset := 0; ; offset += pageSize {
		var page struct {
			Count   int          `json:"count"`
			Results []Annotation `json:"results"`
		}
		if err := dst.do(ctx, http.MethodGet, fmt.Sprintf("/annotations/?limit=%d&offset=%d", pageSize, offset), nil, &page); err != nil {
			return err
		}
		for _, a := range page.Results {
			have[annotationKey(a.Content, a.DateMarker, a.Scope)] = true
		}
		if len(page.Results) == 0 || offset+len(page.Results) >= page.Count {
			break
		}
	}
	for _, a := range anns {
		if a.Deleted {
			continue
		}
		if a.Scope != "project" && a.Scope != "organization" {
			s.AnnotationsSkipped = append(s.AnnotationsSkipped, fmt.Sprintf("%q (scope %s)", a.Content, a.Scope))
			continue
		}
		k := annotationKey(a.Content, a.DateMarker, a.Scope)
		if have[k] {
			continue
		}
		have[k] = true
		s.AnnotationsCreated++
		if dryRun {
			continue
		}
		body := map[string]any{"content": a.Content, "date_marker": a.DateMarker, "scope": a.Scope}
		if err := dst.do(ctx, http.MethodPost, "/annotations/", body, nil); err != nil {
			return fmt.Errorf("annotation %q: %w", a.Content, err)
		}
	}
	return nil
}

// do calls the target project's API.
func (t Target) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(t.URL, "/")+"/api/projects/"+url.PathEscape(t.Project)+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+t.Key)
	req.Header.Set("Content-Type", "application/json")
	c := t.HTTP
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %d: %s", method, path, resp.StatusCode, strings.TrimSpace(string(data)))
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

// Write prints the summary: the changes (made, or planned on a dry run), the changes held
// for approval with their change requests, the flags imported inactive with why, and the
// annotations.
func (s *Summary) Write(w io.Writer, dryRun bool) error {
	var b strings.Builder
	if s.Plan != nil {
		if err := s.Plan.Write(&b); err != nil {
			return err
		}
	}
	if s.Result != nil {
		for _, g := range s.Result.Gated {
			fmt.Fprintf(&b, "held for approval: %s %s %q in change request %s\n", g.Change.Action, g.Change.Kind, g.Change.Name, g.ChangeRequestID)
		}
	}
	t := s.Translation
	if len(t.Unservable) > 0 {
		fmt.Fprintf(&b, "\ncohorts flagedge cannot serve exactly:\n")
		for _, name := range sortedKeys(t.Unservable) {
			fmt.Fprintf(&b, "  %q: %s\n", name, t.Unservable[name])
		}
	}
	if len(t.Warnings) > 0 {
		fmt.Fprintf(&b, "\nWARNING: %d flags imported INACTIVE (activate them once fixed):\n", len(t.Warnings))
		for _, wn := range t.Warnings {
			fmt.Fprintf(&b, "  %s: %s\n", wn.Flag, strings.Join(wn.Reasons, "; "))
		}
	}
	for _, f := range t.SkippedFeatures {
		fmt.Fprintf(&b, "early access feature not imported: %s\n", f)
	}
	for _, a := range s.AnnotationsSkipped {
		fmt.Fprintf(&b, "annotation not imported: %s\n", a)
	}
	if m := s.Members; m.Cohorts > 0 {
		fmt.Fprintf(&b, "static cohorts: %d members of %d cohorts read in %d pages, %d distinct ids written in %s: %d persons became members (%d created)\n",
			m.Read, m.Cohorts, m.Pages, m.DistinctIDs, m.Took.Round(time.Millisecond), m.Added, m.Created)
	}
	if s.StaticMembers > 0 {
		fmt.Fprintf(&b, "static cohorts: about %d members would be copied\n", s.StaticMembers)
	}
	verb := "imported"
	if dryRun {
		verb = "would import (dry run, nothing written)"
	}
	var create, update int
	if s.Plan != nil {
		create, update, _ = s.Plan.Counts()
	}
	fmt.Fprintf(&b, "\n%s: %d flags, %d cohorts, %d early access features from the source; %d created, %d updated, %d annotations created; %d flags inactive with a warning\n",
		verb, len(t.State.Flags), len(t.State.Cohorts), len(t.State.Features), create, update, s.AnnotationsCreated, len(t.Warnings))
	_, err := io.WriteString(w, b.String())
	return err
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

package posthogimport

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"
)

// Member is a person of a cohort as PostHog's /cohorts/{id}/persons/ lists it: the import
// needs its distinct ids (person uuids differ between the two systems).
type Member struct {
	DistinctIDs []string `json:"distinct_ids"`
}

// Members reads a cohort's members page by page (PostHog's limit/offset pages of 100, 429
// honoured as every read), calling each with every page's.
func (s *Source) Members(ctx context.Context, cohortID int64, each func([]Member) error) error {
	return list(ctx, s, fmt.Sprintf("/cohorts/%d/persons/", cohortID), each)
}

// MembersProgress is how far the copy of one static cohort's members has come: told after
// every page read and every batch written.
type MembersProgress struct {
	// Cohort is the cohort's name; Total its size in the source (0 when unknown).
	Cohort string
	Total  int
	// Pages and Read count the pages and members read; Written the members written.
	Pages, Read, Written int
	// Start is when the copy of this cohort began.
	Start time.Time
	// Done reports whether every member of the cohort is written: the last report of it.
	Done bool
}

// Rate returns the members written a second so far.
func (p MembersProgress) Rate() float64 {
	secs := time.Since(p.Start).Seconds()
	if secs <= 0 {
		return 0
	}
	return float64(p.Written) / secs
}

// Left estimates the time left at the rate so far; 0 when it cannot say.
func (p MembersProgress) Left() time.Duration {
	rate := p.Rate()
	if rate == 0 || p.Total <= p.Written {
		return 0
	}
	return time.Duration(float64(p.Total-p.Written) / rate * float64(time.Second))
}

// memberBatch is how many distinct ids one write adds: ten source pages, so that writes
// (one transaction each) are few without making one long; well under the API's maximum of
// 10,000 ids a request.
const memberBatch = 1_000

// maxVerifyMembers bounds the members' distinct ids kept for --verify, and
// maxVerifyMembersPerCohort those of one cohort, so that every cohort is asked about.
const (
	maxVerifyMembers          = 1_000
	maxVerifyMembersPerCohort = 100
)

// MembersCopied is what the copy of static cohorts' members did.
type MembersCopied struct {
	// Cohorts counts the static cohorts whose members were copied.
	Cohorts int
	// Pages and Read count the source's pages and members read.
	Pages, Read int
	// DistinctIDs counts the distinct ids written; Added the persons that became members
	// (not those that already were: a re-run adds none); Created the persons created for
	// distinct ids the target did not have.
	DistinctIDs, Added, Created int
	// Sample is some members' distinct ids (the first of each), for --verify to ask about.
	Sample []string
	// Took is how long the copy took.
	Took time.Duration
}

// copyMembers copies the members of the source's static cohorts into the target's cohorts of
// the same name (created by then), in batches through add_persons_to_static_cohort with
// their distinct ids: a person absent from the target is created, one already a member stays
// one, so an interrupted copy run again completes without duplicates.
func copyMembers(ctx context.Context, src *Source, dst Target, p *Project, names map[int64]string, out *MembersCopied) error {
	start := time.Now()
	defer func() { out.Took = time.Since(start) }()
	ids, err := dst.cohortIDs(ctx)
	if err != nil {
		return err
	}
	for _, co := range p.Cohorts {
		if !co.IsStatic || co.Deleted {
			continue
		}
		name := names[co.ID]
		target, ok := ids[name]
		if !ok {
			return fmt.Errorf("static cohort %q: the target has no cohort of that name (its creation is waiting for approval?)", name)
		}
		out.Cohorts++
		prog := MembersProgress{Cohort: name, Start: time.Now()}
		if co.Count != nil {
			prog.Total = *co.Count
		}
		var batch []string
		sampled := 0
		write := func() error {
			for len(batch) > 0 {
				n := min(len(batch), memberBatch)
				var res struct {
					Added   int `json:"persons_added"`
					Created int `json:"persons_created"`
				}
				if err := dst.do(ctx, http.MethodPatch, "/cohorts/"+strconv.FormatInt(target, 10)+"/add_persons_to_static_cohort/",
					map[string]any{"distinct_ids": batch[:n]}, &res); err != nil {
					return fmt.Errorf("static cohort %q: %w", name, err)
				}
				out.DistinctIDs += n
				out.Added += res.Added
				out.Created += res.Created
				batch = batch[n:]
			}
			prog.Written = prog.Read
			if dst.OnMembers != nil {
				dst.OnMembers(prog)
			}
			return nil
		}
		err := src.Members(ctx, co.ID, func(page []Member) error {
			prog.Pages++
			out.Pages++
			for _, m := range page {
				if len(m.DistinctIDs) == 0 {
					continue
				}
				prog.Read++
				out.Read++
				batch = append(batch, m.DistinctIDs...)
				if sampled < maxVerifyMembersPerCohort && len(out.Sample) < maxVerifyMembers && !slices.Contains(out.Sample, m.DistinctIDs[0]) {
					out.Sample = append(out.Sample, m.DistinctIDs[0])
					sampled++
				}
			}
			if dst.OnMembers != nil {
				dst.OnMembers(prog)
			}
			if len(batch) >= memberBatch {
				return write()
			}
			return nil
		})
		if err != nil {
			return err
		}
		prog.Done = true
		if err := write(); err != nil {
			return err
		}
	}
	return nil
}

// cohortIDs reads the target's cohorts: id by name.
func (t Target) cohortIDs(ctx context.Context) (map[string]int64, error) {
	ids := map[string]int64{}
	for offset := 0; ; offset += pageSize {
		var page struct {
			Count   int `json:"count"`
			Results []struct {
				ID      int64  `json:"id"`
				Name    string `json:"name"`
				Deleted bool   `json:"deleted"`
			} `json:"results"`
		}
		if err := t.do(ctx, http.MethodGet, fmt.Sprintf("/cohorts/?limit=%d&offset=%d", pageSize, offset), nil, &page); err != nil {
			return nil, err
		}
		for _, co := range page.Results {
			if !co.Deleted {
				ids[co.Name] = co.ID
			}
		}
		if len(page.Results) == 0 || offset+len(page.Results) >= page.Count {
			return ids, nil
		}
	}
}

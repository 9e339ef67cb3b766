package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/flagedge/flagedge/controlplane/flagsascode"
	"github.com/flagedge/flagedge/controlplane/posthogimport"
)

const importUsage = `usage: controlplane import posthog --from-url URL --from-project N --from-key phx_… [--dry-run]
  (with --url, --api-key, --project of the flagedge project, or FLAGEDGE_URL, FLAGEDGE_API_KEY, FLAGEDGE_PROJECT)`

// importCmd runs import posthog: it reads a PostHog project over its API and applies it to a
// flagedge project (see posthogimport), printing progress on stderr and a summary on stdout.
// As flags apply's, every error is exit status 1; differences --verify found are 2.
func importCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	err := runImport(ctx, args, stdout, stderr)
	var ee *exitError
	if err == nil || errors.Is(err, flag.ErrHelp) || errors.As(err, &ee) {
		return err
	}
	return &exitError{code: 1, err: err}
}

func runImport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "posthog" {
		return errors.New(importUsage)
	}
	fs := newFlagSet("import posthog", stderr)
	fromURL := fs.String("from-url", envOr("POSTHOG_URL", "https://us.posthog.com"), "PostHog's API, e.g. https://us.posthog.com or https://eu.posthog.com (env POSTHOG_URL)")
	fromProject := fs.String("from-project", os.Getenv("POSTHOG_PROJECT"), "the PostHog project's id (env POSTHOG_PROJECT)")
	fromKey := fs.String("from-key", os.Getenv("POSTHOG_API_KEY"), "a PostHog personal API key (phx_…) with feature_flag:read, cohort:read, person:read (static cohorts' members), early_access_feature:read and annotation:read (env POSTHOG_API_KEY)")
	apiURL := fs.String("url", envOr("FLAGEDGE_URL", "http://127.0.0.1:8000"), "the flagedge control plane's API (env FLAGEDGE_URL)")
	key := fs.String("api-key", os.Getenv("FLAGEDGE_API_KEY"), "a flagedge personal API key: feature_flag, cohort, early_access_feature and annotation read and write (env FLAGEDGE_API_KEY)")
	project := fs.String("project", os.Getenv("FLAGEDGE_PROJECT"), "the flagedge project's id (env FLAGEDGE_PROJECT)")
	dryRun := fs.Bool("dry-run", false, "print what the import would change and write nothing")
	verify := fs.Int("verify", 0, "after the import, ask both sides' /flags for this many synthetic users and report every difference")
	fromFlagsURL := fs.String("from-flags-url", "", "the source's /flags host for --verify, e.g. https://us.i.posthog.com (default --from-url)")
	fromToken := fs.String("from-token", os.Getenv("POSTHOG_PROJECT_TOKEN"), "the source project's token (phc_…) for --verify (env POSTHOG_PROJECT_TOKEN)")
	edgeURL := fs.String("edge-url", os.Getenv("FLAGEDGE_EDGE_URL"), "a flagedge edge serving the project, for --verify (env FLAGEDGE_EDGE_URL)")
	edgeToken := fs.String("edge-token", os.Getenv("FLAGEDGE_PROJECT_TOKEN"), "the flagedge project's token (phc_…) for --verify (env FLAGEDGE_PROJECT_TOKEN)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *fromProject == "" || *fromKey == "" || *key == "" || *project == "" {
		return errors.New("--from-project, --from-key, --api-key and --project are required\n" + importUsage)
	}
	if *verify > 0 && (*fromToken == "" || *edgeURL == "" || *edgeToken == "") {
		return errors.New("--verify needs --from-token, --edge-url and --edge-token")
	}
	if *fromFlagsURL == "" {
		*fromFlagsURL = *fromURL
	}
	src, err := posthogimport.NewSource(*fromURL, *fromKey, *fromProject)
	if err != nil {
		return err
	}
	start, pages, objects := time.Now(), 0, 0
	src.OnPage = func(path string, n int) {
		pages++
		objects += n
		fmt.Fprintf(stderr, "read %s page: %d pages, %d objects, %.1f requests/s\n", path, pages, objects, float64(pages)/time.Since(start).Seconds())
	}
	dst := posthogimport.Target{Client: flagsascode.NewClient(*apiURL, *key, *project, nil), URL: *apiURL, Key: *key, Project: *project,
		OnMembers: membersProgress(stderr)}
	sum, err := posthogimport.Import(ctx, src, dst, *dryRun)
	if sum != nil {
		if werr := sum.Write(stdout, *dryRun); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		return fmt.Errorf("import stopped (re-run it: it resumes where it stopped): %w", err)
	}
	fmt.Fprintf(stderr, "imported in %s\n", time.Since(start).Round(time.Millisecond))
	if *verify == 0 || *dryRun {
		return nil
	}
	if err := waitImported(ctx, dst.Client, sum); err != nil {
		return err
	}
	return verifyImport(ctx, sum, *verify, posthogimport.Endpoint{URL: *fromFlagsURL, Token: *fromToken},
		posthogimport.Endpoint{URL: *edgeURL, Token: *edgeToken}, stdout)
}

// membersProgress returns what prints the copy of static cohorts' members: on a terminal,
// one line rewritten in place (pages read, members written, rate, time left); elsewhere (a
// CI log), a line every 100 pages and one when a cohort is done.
func membersProgress(stderr io.Writer) func(posthogimport.MembersProgress) {
	terminal := false
	if f, ok := stderr.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			terminal = true
		}
	}
	return func(p posthogimport.MembersProgress) {
		done := p.Done
		if !terminal && p.Pages%100 != 0 && !done {
			return
		}
		left := "?"
		if d := p.Left(); d > 0 {
			left = d.Round(time.Second).String()
		}
		line := fmt.Sprintf("static cohort %q: %d pages read, %d of %d members written, %.0f/s, %s left", p.Cohort, p.Pages, p.Written, p.Total, p.Rate(), left)
		switch {
		case terminal && done:
			fmt.Fprintf(stderr, "\r\033[K%s\n", line)
		case terminal:
			fmt.Fprintf(stderr, "\r\033[K%s", line)
		default:
			fmt.Fprintln(stderr, line)
		}
	}
}

// waitImported waits (two minutes at most) until every connected edge serves what the
// import wrote, so that --verify compares the imported flags and members.
func waitImported(ctx context.Context, client *flagsascode.Client, sum *posthogimport.Summary) error {
	if (sum.Result == nil || len(sum.Result.Applied) == 0) && sum.Members.Added == 0 && sum.Members.Created == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	version, err := client.CurrentVersion(ctx)
	if err != nil {
		return err
	}
	if sum.Result != nil {
		version = max(version, sum.Result.Version)
	}
	_, err = client.WaitLive(ctx, version)
	return err
}

// errDifferences is --verify's answer when some flag answered differently: exit status 2.
var errDifferences = &exitError{code: 2}

// verifyImport waits until the edge serves the import, compares both sides for n synthetic
// users and prints every difference; flags imported inactive on purpose are left out.
func verifyImport(ctx context.Context, sum *posthogimport.Summary, n int, source, target posthogimport.Endpoint, stdout io.Writer) error {
	var skip []string
	for _, w := range sum.Translation.Warnings {
		skip = append(skip, w.Flag)
	}
	v, err := posthogimport.Verify(ctx, sum.Translation.State, n, source, target, sum.Members.Sample, skip)
	for _, d := range v.Differences {
		fmt.Fprintf(stdout, "difference: %s for %s: source %q, flagedge %q\n", d.Flag, d.DistinctID, d.Source, d.Target)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "verify: %d users, %d flags compared (%d imported inactive left out), %d answers compared, %d differences\n",
		n, len(sum.Translation.State.Flags)-len(skip), len(skip), v.Compared, len(v.Differences))
	if len(v.Differences) > 0 {
		return errDifferences
	}
	return nil
}

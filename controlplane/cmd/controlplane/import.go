package main

import (
	"context"
	"errors"
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
func importCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "posthog" {
		return errors.New(importUsage)
	}
	fs := newFlagSet("import posthog", stderr)
	fromURL := fs.String("from-url", envOr("POSTHOG_URL", "https://us.posthog.com"), "PostHog's API, e.g. https://us.posthog.com or https://eu.posthog.com (env POSTHOG_URL)")
	fromProject := fs.String("from-project", os.Getenv("POSTHOG_PROJECT"), "the PostHog project's id (env POSTHOG_PROJECT)")
	fromKey := fs.String("from-key", os.Getenv("POSTHOG_API_KEY"), "a PostHog personal API key (phx_…) with feature_flag:read, cohort:read, early_access_feature:read and annotation:read (env POSTHOG_API_KEY)")
	apiURL := fs.String("url", envOr("FLAGEDGE_URL", "http://127.0.0.1:8000"), "the flagedge control plane's API (env FLAGEDGE_URL)")
	key := fs.String("api-key", os.Getenv("FLAGEDGE_API_KEY"), "a flagedge personal API key: feature_flag, cohort, early_access_feature and annotation read and write (env FLAGEDGE_API_KEY)")
	project := fs.String("project", os.Getenv("FLAGEDGE_PROJECT"), "the flagedge project's id (env FLAGEDGE_PROJECT)")
	dryRun := fs.Bool("dry-run", false, "print what the import would change and write nothing")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *fromProject == "" || *fromKey == "" || *key == "" || *project == "" {
		return errors.New("--from-project, --from-key, --api-key and --project are required\n" + importUsage)
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
	dst := posthogimport.Target{Client: flagsascode.NewClient(*apiURL, *key, *project, nil), URL: *apiURL, Key: *key, Project: *project}
	sum, err := posthogimport.Import(ctx, src, dst, *dryRun)
	if sum != nil {
		if werr := sum.Write(stdout, *dryRun); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		return fmt.Errorf("import stopped (re-run it: it resumes where it stopped): %w", err)
	}
	fmt.Fprintf(stderr, "done in %s\n", time.Since(start).Round(time.Millisecond))
	return nil
}

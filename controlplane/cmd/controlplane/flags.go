package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/flagedge/flagedge/controlplane/flagsascode"
)

const flagsUsage = `usage: controlplane flags export [-o FILE] | flags plan -f FILE [--prune] [--json] | flags apply -f FILE [--prune] [--wait] [--json]
  (each with --url, --api-key, --project, or FLAGEDGE_URL, FLAGEDGE_API_KEY, FLAGEDGE_PROJECT)`

// exitError ends the program with its code, printing err when there is one: the flags
// commands follow Terraform's -detailed-exitcode (0 no changes, 1 error, 2 changes).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// errChanges is plan's answer when the project differs from the file: exit status 2.
var errChanges = &exitError{code: 2}

// flagsCmd runs flags export, plan and apply against a control plane's API: every error is
// exit status 1, a plan with changes 2.
func flagsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	err := runFlags(ctx, args, stdout, stderr)
	var ee *exitError
	if err == nil || errors.Is(err, flag.ErrHelp) || errors.As(err, &ee) {
		return err
	}
	return &exitError{code: 1, err: err}
}

func runFlags(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "export" && args[0] != "plan" && args[0] != "apply") {
		return errors.New(flagsUsage)
	}
	cmd := args[0]
	fs := newFlagSet("flags "+cmd, stderr)
	apiURL := fs.String("url", envOr("FLAGEDGE_URL", "http://127.0.0.1:8000"), "the control plane's API (env FLAGEDGE_URL)")
	key := fs.String("api-key", os.Getenv("FLAGEDGE_API_KEY"), "a personal API key: feature_flag, cohort and early_access_feature read (and write to apply), project:read to --wait (env FLAGEDGE_API_KEY)")
	project := fs.String("project", os.Getenv("FLAGEDGE_PROJECT"), "the project's id (env FLAGEDGE_PROJECT)")
	var file, output *string
	var prune, wait, asJSON *bool
	var timeout *time.Duration
	if cmd == "export" {
		output = fs.String("o", "", "write the file here instead of to stdout")
	} else {
		file = fs.String("f", "", "the flags file (required)")
		prune = fs.Bool("prune", false, "also delete flags (softly) and early access features that the file lacks")
		asJSON = fs.Bool("json", false, "print one JSON line instead of the readable plan (for scripts)")
	}
	if cmd == "apply" {
		wait = fs.Bool("wait", false, "return once every connected edge serves the result")
		timeout = fs.Duration("timeout", 5*time.Minute, "how long --wait waits")
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *key == "" || *project == "" {
		return errors.New("--api-key and --project (or FLAGEDGE_API_KEY and FLAGEDGE_PROJECT) are required")
	}
	client := flagsascode.NewClient(*apiURL, *key, *project, nil)
	if cmd == "export" {
		return exportFlags(ctx, client, *output, stdout)
	}
	if *file == "" {
		return errors.New("-f FILE is required")
	}
	data, err := os.ReadFile(*file)
	if err != nil {
		return err
	}
	want, err := flagsascode.Parse(*file, data)
	if err != nil {
		return fmt.Errorf("%s is not valid, nothing was changed:\n%w", *file, err)
	}
	if cmd == "plan" {
		plan, err := flagsascode.NewPlan(ctx, client, want, *prune)
		if err != nil {
			return err
		}
		if err := writePlan(stdout, plan, nil, *asJSON); err != nil {
			return err
		}
		if !plan.Empty() {
			return errChanges
		}
		return nil
	}
	return applyFlags(ctx, client, want, *prune, *wait, *asJSON, *timeout, stdout)
}

func exportFlags(ctx context.Context, client *flagsascode.Client, output string, stdout io.Writer) error {
	s, err := flagsascode.Export(ctx, client)
	if err != nil {
		return err
	}
	data, err := flagsascode.Marshal(s)
	if err != nil {
		return err
	}
	if output != "" {
		return os.WriteFile(output, data, 0o644)
	}
	_, err = stdout.Write(data)
	return err
}

// applyFlags applies the file, prints what it did (the changes held for approval with their
// change requests) and, with wait, waits for the edges.
func applyFlags(ctx context.Context, client *flagsascode.Client, want *flagsascode.State, prune, wait, asJSON bool,
	timeout time.Duration, stdout io.Writer) error {
	res, err := flagsascode.Apply(ctx, client, want, prune)
	if res != nil {
		if werr := writePlan(stdout, res.Plan, res, asJSON); werr != nil {
			return werr
		}
	}
	if err != nil || !wait || len(res.Applied) == 0 {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	version, err := client.CurrentVersion(ctx)
	if err != nil {
		return err
	}
	version = max(version, res.Version)
	st, err := client.WaitLive(ctx, version)
	if err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(stdout).Encode(map[string]any{"live": st.Live, "total": st.Total, "version": version})
	}
	_, err = fmt.Fprintf(stdout, "Live: %d of %d connected edges serve version %d.\n", st.Live, st.Total, version)
	return err
}

// writePlan prints a plan and, after apply, what was done: readable, or as one JSON line
// {"create", "update", "delete", "changes": [{"action", "kind", "name", "diffs": [{"path",
// "old", "new"}]}], and after apply "applied" (a count) and "gated": [{"kind", "name",
// "action", "change_request_id", "detail"}]}.
func writePlan(w io.Writer, plan *flagsascode.Plan, res *flagsascode.Result, asJSON bool) error {
	if !asJSON {
		if err := plan.Write(w); err != nil || res == nil {
			return err
		}
		fmt.Fprintf(w, "Applied %d of %d changes.\n", len(res.Applied), len(plan.Changes))
		for _, g := range res.Gated {
			fmt.Fprintf(w, "Held for approval: %s %s %q (%s): change request %s\n", g.Change.Kind, g.Change.Action,
				g.Change.Name, g.Detail, g.ChangeRequestID)
		}
		return nil
	}
	create, update, del := plan.Counts()
	changes := []map[string]any{}
	for _, c := range plan.Changes {
		diffs := []map[string]any{}
		for _, d := range c.Diffs {
			diff := map[string]any{"path": d.Path}
			if d.HasOld {
				diff["old"] = d.Old
			}
			if d.HasNew {
				diff["new"] = d.New
			}
			diffs = append(diffs, diff)
		}
		changes = append(changes, map[string]any{"action": c.Action, "kind": c.Kind, "name": c.Name, "diffs": diffs})
	}
	out := map[string]any{"create": create, "update": update, "delete": del, "changes": changes}
	if res != nil {
		gated := []map[string]any{}
		for _, g := range res.Gated {
			gated = append(gated, map[string]any{"kind": g.Change.Kind, "name": g.Change.Name, "action": g.Change.Action,
				"change_request_id": g.ChangeRequestID, "detail": g.Detail})
		}
		out["applied"], out["gated"] = len(res.Applied), gated
	}
	return json.NewEncoder(w).Encode(out)
}

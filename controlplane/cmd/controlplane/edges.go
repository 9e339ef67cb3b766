package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/flagedge/flagedge/controlplane/postgres"
)

const edgesUsage = `usage: controlplane edges create --name N [--projects 1,2] | edges list | edges revoke --name N`

// edgesCmd issues, lists and revokes the credentials edges present to the sync service.
func edgesCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "create" && args[0] != "list" && args[0] != "revoke") {
		return errors.New(edgesUsage)
	}
	fs := newFlagSet("edges "+args[0], stderr)
	dbURL := databaseFlag(fs)
	var name, projectList *string
	if args[0] != "list" {
		name = fs.String("name", "", "the edge's name, as it appears in the control plane's logs and metrics (required)")
	}
	if args[0] == "create" {
		projectList = fs.String("projects", "", "comma-separated ids of the only projects the edge is served; empty: every project")
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if name != nil && *name == "" {
		return errors.New("--name is required")
	}
	var projects []int64
	if projectList != nil && *projectList != "" {
		var err error
		if projects, err = parseProjectIDs(*projectList); err != nil {
			return err
		}
	}
	db, err := openDatabase(ctx, *dbURL)
	if err != nil {
		return err
	}
	defer db.Close()
	edges := postgres.NewEdgeService(db)
	out := json.NewEncoder(stdout)
	switch args[0] {
	case "create":
		e, token, err := edges.CreateEdge(ctx, *name, projects)
		if err != nil {
			return err
		}
		return out.Encode(map[string]any{"edge_id": e.ID, "name": e.Name, "projects": e.Projects, "edge_token": token})
	case "list":
		list, err := edges.FindEdges(ctx)
		if err != nil {
			return err
		}
		for _, e := range list {
			line := map[string]any{"edge_id": e.ID, "name": e.Name, "projects": e.Projects, "created_at": e.CreatedAt.UTC().Format(time.RFC3339), "revoked_at": nil}
			if e.RevokedAt != nil {
				line["revoked_at"] = e.RevokedAt.UTC().Format(time.RFC3339)
			}
			if err := out.Encode(line); err != nil {
				return err
			}
		}
		return nil
	case "revoke":
		return edges.RevokeEdge(ctx, *name)
	}
	return errors.New(edgesUsage)
}

// parseProjectIDs reads --projects: positive project ids separated by commas.
func parseProjectIDs(list string) ([]int64, error) {
	var ids []int64
	for _, f := range strings.Split(list, ",") {
		id, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil || id <= 0 {
			return nil, fmt.Errorf("--projects: %q is not a project id", strings.TrimSpace(f))
		}
		ids = append(ids, id)
	}
	return ids, nil
}

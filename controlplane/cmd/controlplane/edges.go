package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"time"

	"github.com/flagedge/flagedge/controlplane/postgres"
)

const edgesUsage = `usage: controlplane edges create --name N | edges list | edges revoke --name N`

// edgesCmd issues, lists and revokes the credentials edges present to the sync service.
func edgesCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "create" && args[0] != "list" && args[0] != "revoke") {
		return errors.New(edgesUsage)
	}
	fs := newFlagSet("edges "+args[0], stderr)
	dbURL := databaseFlag(fs)
	var name *string
	if args[0] != "list" {
		name = fs.String("name", "", "the edge's name, as it appears in the control plane's logs and metrics (required)")
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if name != nil && *name == "" {
		return errors.New("--name is required")
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
		e, token, err := edges.CreateEdge(ctx, *name)
		if err != nil {
			return err
		}
		return out.Encode(map[string]string{"edge_id": e.ID, "name": e.Name, "edge_token": token})
	case "list":
		list, err := edges.FindEdges(ctx)
		if err != nil {
			return err
		}
		for _, e := range list {
			line := map[string]any{"edge_id": e.ID, "name": e.Name, "created_at": e.CreatedAt.UTC().Format(time.RFC3339), "revoked_at": nil}
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

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"

	"github.com/flagedge/flagedge/controlplane/postgres"
	"github.com/flagedge/flagedge/controlplane/syncserver"
	"github.com/flagedge/flagedge/shared/snapshotbundle"
	"github.com/flagedge/flagedge/shared/syncpb"
)

const snapshotsUsage = `usage: controlplane snapshots keygen --private-key FILE --public-key FILE
       controlplane snapshots export --signing-key FILE (--project N | --all) > bundle`

// snapshotsCmd makes the signed bundles an edge can start from when it has no snapshot on
// disk and no control plane to reach (edge --bootstrap-bundle).
func snapshotsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New(snapshotsUsage)
	}
	switch args[0] {
	case "keygen":
		return snapshotsKeygen(args[1:], stderr)
	case "export":
		return snapshotsExport(ctx, args[1:], stdout, stderr)
	}
	return errors.New(snapshotsUsage)
}

func snapshotsKeygen(args []string, stderr io.Writer) error {
	fs := newFlagSet("snapshots keygen", stderr)
	privPath := fs.String("private-key", "", "where to write the Ed25519 signing key (PEM, mode 0600; keep it with the control plane's operators) (required)")
	pubPath := fs.String("public-key", "", "where to write its public key (PEM), for edges' --bundle-public-key (required)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *privPath == "" || *pubPath == "" {
		return errors.New("--private-key and --public-key are required")
	}
	priv, pub, err := snapshotbundle.GenerateKey()
	if err != nil {
		return err
	}
	// O_EXCL: an existing key is never overwritten, so bundles it signed keep verifying.
	f, err := os.OpenFile(*privPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(priv); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.WriteFile(*pubPath, pub, 0o644)
}

func snapshotsExport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("snapshots export", stderr)
	dbURL := databaseFlag(fs)
	keyPath := fs.String("signing-key", os.Getenv("FLAGEDGE_BUNDLE_SIGNING_KEY"), "the Ed25519 private key from snapshots keygen (PEM) (env FLAGEDGE_BUNDLE_SIGNING_KEY) (required)")
	project := fs.Int64("project", 0, "the project to export")
	all := fs.Bool("all", false, "export every project")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if (*project == 0) == !*all {
		return errors.New("give exactly one of --project N and --all")
	}
	if *keyPath == "" {
		return errors.New("--signing-key is required")
	}
	keyPEM, err := os.ReadFile(*keyPath)
	if err != nil {
		return err
	}
	key, err := snapshotbundle.ParsePrivateKey(keyPEM)
	if err != nil {
		return fmt.Errorf("--signing-key: %w", err)
	}
	db, err := openDatabase(ctx, *dbURL)
	if err != nil {
		return err
	}
	defer db.Close()
	store := postgres.NewSnapshotStore(db)
	databaseID, err := store.DatabaseID(ctx)
	if err != nil {
		return err
	}
	ids := []int64{*project}
	if *all {
		versions, err := store.ProjectVersions(ctx)
		if err != nil {
			return err
		}
		ids = slices.Sorted(maps.Keys(versions))
	}
	snapshots := make([]*syncpb.ProjectSnapshot, 0, len(ids))
	for _, id := range ids {
		s, err := store.BuildSnapshot(ctx, id)
		if err != nil {
			return fmt.Errorf("project %d: %w", id, err)
		}
		snapshots = append(snapshots, syncserver.SnapshotMessage(s))
	}
	bundle, err := snapshotbundle.Encode(key, databaseID, snapshots)
	if err != nil {
		return err
	}
	if _, err := stdout.Write(bundle); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "exported %d project(s) of database %s, %d bytes\n", len(snapshots), databaseID, len(bundle))
	return nil
}

package controlplane

import (
	"context"
	"time"
)

// EdgeProjectStatus is one connected edge as a project sees it: which snapshot version of the
// project it serves.
type EdgeProjectStatus struct {
	// Name is the name of the edge's token; EdgeID what the edge calls itself (--edge-id).
	Name   string
	EdgeID string
	// Replica names the control-plane replica the edge's Watch stream is connected to, or that
	// of the first relay on its path.
	Replica string
	// Path is the edge's way from the control plane: the names of the relays (edge
	// --serve-edges) its stream goes through and its own, joined by " → "; its name alone when
	// it is connected directly.
	Path        string
	ConnectedAt time.Time
	// Version is the project's snapshot version the edge acknowledged serving (0: none yet),
	// AckedAt when; Lag how many versions it is behind the project's current one.
	Version int64
	AckedAt *time.Time
	Lag     int64
}

// ProjectEdges is every connected edge of a project, with the project's current version.
type ProjectEdges struct {
	Current int64
	Edges   []EdgeProjectStatus
}

// Laggards returns the edges that do not serve version yet.
func (p *ProjectEdges) Laggards(version int64) []EdgeProjectStatus {
	var out []EdgeProjectStatus
	for _, e := range p.Edges {
		if e.Version < version {
			out = append(out, e)
		}
	}
	return out
}

// EdgeSessionStore records which versions the connected edges serve, in storage every
// control-plane replica shares: an edge is connected to one replica, and any replica answers
// rollout questions.
type EdgeSessionStore interface {
	// OpenSessions records new Watch streams, all in one write, each after forgetting the
	// earlier session it replaces (its replica may have died without closing it; a session
	// of another edge is left alone).
	OpenSessions(ctx context.Context, opens []SessionOpening) error
	// CloseSessions forgets sessions whose streams ended, in one write.
	CloseSessions(ctx context.Context, ids []string) error
	// Heartbeat marks the replica's sessions as still connected and deletes sessions that
	// nobody marked for longer than the store counts a session connected (a dead replica's).
	Heartbeat(ctx context.Context, replicaID string) error
	// Acknowledge records, in one write, what the sessions' edges serve now. It returns one
	// result per acknowledgement: nil, or NotFound for a session that is not the edge's or no
	// longer open; an error fails them all.
	Acknowledge(ctx context.Context, acks []Acknowledgement) ([]error, error)
	// FindProjectEdges lists the connected edges with what they serve of the project; NotFound
	// when there is no such project.
	FindProjectEdges(ctx context.Context, projectID int64) (*ProjectEdges, error)
	// CountLaggards counts the connected edges serving the project that do not serve version
	// yet (Laggards of FindProjectEdges, without reading every edge); NotFound when there is
	// no such project.
	CountLaggards(ctx context.Context, projectID, version int64) (int, error)
	// AcknowledgedBelow reports whether some session's last acknowledgement of the project
	// names a version below version: a cheap sign that laggards remain, not proof (that
	// session may not count, as CountLaggards would find), read between counts while the
	// acknowledgements of a change arrive.
	AcknowledgedBelow(ctx context.Context, projectID, version int64) (bool, error)
	// ReportRelayed records what a relay reports of the sessions of the edges behind it, in
	// one write; it returns the reported sessions it does not hold (their parent ended, or
	// they were never opened) for the relay to open again. NotFound when the relay's own
	// session is not open.
	ReportRelayed(ctx context.Context, r RelayReport) (unknown []string, err error)
}

// RelayReport is one batch of a relay's report on the sessions behind it. The sessions it
// opens hang off its own (Session) or off a session already behind it (Parent): when a
// session ends, every session behind it ends too. A session behind a relay counts for a
// project only when every edge on its path is served the project.
type RelayReport struct {
	// Relay is the name of the reporting relay's token; Session its own stream's session,
	// served by the replica named Replica.
	Relay, Session, Replica string
	Opened                  []RelayedOpening
	Closed                  []string
	Acks                    []Acknowledgement
}

// RelayedOpening is a session behind a relay: ID is made by the relay that serves the
// stream, Parent is the session it hangs off ("" for the reporter's own), Replaces the edge's
// earlier session ("" when none).
type RelayedOpening struct {
	ID, Parent, EdgeName, EdgeID, Replaces string
}

// Acknowledgement is what one session's edge says it serves now: the versions of projects
// (those changed since its last acknowledgement), and the projects it no longer holds.
type Acknowledgement struct {
	SessionID, EdgeName string
	Versions            map[int64]int64
	Removed             []int64
}

// SessionOpening is a Watch stream to record as a session: ID is the session's (a UUID the
// replica makes), served by the replica (ReplicaID: its process, Replica: its name), of the
// edge named EdgeName (its token) that calls itself EdgeID; Replaces is the edge's earlier
// session ("" when none).
type SessionOpening struct {
	ID, ReplicaID, Replica, EdgeName, EdgeID, Replaces string
}

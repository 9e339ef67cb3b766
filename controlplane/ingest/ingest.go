// Package ingest is the one owner of event ingestion at the control plane, whatever brought
// the events: the gRPC sync service's Ingest calls and the JetStream event log's consumer
// both hand it spool records (encoded EventBatch messages). It decodes them leniently (one
// bad event cannot spoil its batch), stores them through the event store in one transaction,
// and counts and logs what was stored, what was a duplicate and what was dead-lettered.
package ingest

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flagedge/flagedge/controlplane"
)

// maxDeadLetterLogs bounds the log lines one call writes about dead letters; the counter and
// the table have them all.
const maxDeadLetterLogs = 10

// Ingester stores spool records and counts what became of their events.
type Ingester struct {
	events       controlplane.EventStore
	log          *slog.Logger
	ingested     *prometheus.CounterVec
	deadLettered *prometheus.CounterVec
}

// New returns the ingester storing into events; its metrics go to reg (nil: none).
func New(events controlplane.EventStore, log *slog.Logger, reg prometheus.Registerer) *Ingester {
	in := &Ingester{events: events, log: log,
		ingested: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flagedge_controlplane_ingested_events_total",
			Help: "Events received from edges, by result: stored or duplicate."}, []string{"result"}),
		deadLettered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flagedge_controlplane_dead_lettered_events_total",
			Help: "Events refused for their content and written to the dead-letter table, by SQLSTATE (or \"undecodable\")."}, []string{"sqlstate"}),
	}
	if reg != nil {
		reg.MustRegister(in.ingested, in.deadLettered)
	}
	return in
}

// IngestRecords stores spool records, record i captured by edge edgeIDs[i], in one
// transaction: IngestBatches of each record's Decode.
func (in *Ingester) IngestRecords(ctx context.Context, records [][]byte, edgeIDs []string) (controlplane.IngestResult, error) {
	batches := make([]controlplane.EventBatch, 0, len(records))
	for i, raw := range records {
		batches = append(batches, Decode(raw, edgeIDs[i]))
	}
	return in.IngestBatches(ctx, batches)
}

// IngestBatches stores decoded batches in one transaction. An event that can never be stored
// (PostgreSQL refuses its content, or it cannot be decoded) is dead-lettered, counted and
// logged, and the call still succeeds. It returns only once the transaction has committed; on
// error nothing is stored and the batches may be given again.
func (in *Ingester) IngestBatches(ctx context.Context, batches []controlplane.EventBatch) (controlplane.IngestResult, error) {
	res, err := in.events.Ingest(ctx, batches)
	if err != nil {
		return res, err
	}
	in.ingested.WithLabelValues("stored").Add(float64(res.Stored))
	in.ingested.WithLabelValues("duplicate").Add(float64(res.Duplicates))
	edge := "" // the edge for the logs: the dead_letters table has each event's own
	if len(res.DeadLetters) > 0 {
		edge = batches[0].EdgeID
		for _, b := range batches {
			if b.EdgeID != edge {
				edge = "(several)"
				break
			}
		}
	}
	for i, d := range res.DeadLetters {
		in.deadLettered.WithLabelValues(d.Code).Inc()
		if i < maxDeadLetterLogs {
			in.log.Warn("event dead-lettered", "edge_id", edge, "project", d.ProjectID, "uuid", d.UUID, "sqlstate", d.Code, "reason", d.Reason)
		}
	}
	if n := len(res.DeadLetters); n > maxDeadLetterLogs {
		in.log.Warn("more events dead-lettered", "edge_id", edge, "count", n-maxDeadLetterLogs)
	}
	return res, nil
}

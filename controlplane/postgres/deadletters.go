package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/shared/event"
)

// isDataError reports whether err is PostgreSQL (or pgx, before sending) refusing a value
// for what it is: retrying the same events can never succeed, so the events must be set
// aside rather than retried. These are the SQLSTATE classes
//
//	22 data exception: a NUL in text or jsonb (22P05, 22021), invalid UTF-8 (22021), bad
//	   JSON (22P02), a number or timestamp out of range (22003, 22008), …
//	23 integrity constraint violation: a missing value (23502), an event for a project that
//	   no longer exists (23503)
//	54 program limit exceeded: an id too long for its index (54000), JSON nested too deep
//	   (54001)
//
// Everything else is transient: connection failures (08), serialization failures and
// deadlocks (40), lack of resources (53), an operator or timeout cancelling (57), and
// errors that are not PostgreSQL's (network, context). The caller retries those.
func isDataError(err error) bool {
	var de *dataError
	if errors.As(err, &de) {
		return true
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || len(pgErr.Code) != 5 {
		return false
	}
	switch pgErr.Code[:2] {
	case "22", "23", "54":
		return true
	}
	return false
}

// describeDataError returns the SQLSTATE and message of a data error, for the dead-letter
// table.
func describeDataError(err error) (code, reason string) {
	var de *dataError
	if errors.As(err, &de) {
		return de.code, de.message
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		reason = pgErr.Message
		if pgErr.Detail != "" {
			reason += " (" + pgErr.Detail + ")"
		}
		return pgErr.Code, reason
	}
	return "", err.Error()
}

// dataError is a value refused before it reaches PostgreSQL because PostgreSQL would refuse
// it, or because the driver cannot encode it at all; code is the SQLSTATE PostgreSQL gives
// the same refusal.
type dataError struct {
	code, message string
}

func (e *dataError) Error() string { return "SQLSTATE " + e.code + ": " + e.message }

// minTimestampUs is the earliest timestamptz PostgreSQL holds (4713 BC), in microseconds
// since the Unix epoch. Every later int64 microsecond count is within its range.
const minTimestampUs = -210866803200000000

// checkEncodable refuses an event whose timestamps PostgreSQL cannot hold. The driver
// converts times to microseconds since 2000 and, this far out of range, the subtraction
// wraps around: such a time would be stored as a different one rather than refused.
func checkEncodable(e *controlplane.Event) error {
	for _, t := range []struct {
		name string
		us   int64
	}{{"timestamp", e.Timestamp.UnixMicro()}, {"received time", e.ReceivedAt.UnixMicro()}} {
		if t.us < minTimestampUs {
			return &dataError{code: "22008", message: fmt.Sprintf("%s out of range: %d µs since the epoch", t.name, t.us)}
		}
	}
	return nil
}

// deadLetter writes an event PostgreSQL refused to the dead-letter table (once: the table
// is unique on the event's digest, so a redelivered batch adds nothing) and, when it is
// new, reports it in res.
func (s *EventStore) deadLetter(ctx context.Context, tx pgx.Tx, ev sourcedEvent, code, reason string, res *controlplane.IngestResult) error {
	raw, format := ev.event.Raw, "sync.CapturedEvent"
	if raw == nil {
		raw, format = fallbackRaw(&ev.event), "json"
	}
	h := sha256.New()
	_ = binary.Write(h, binary.BigEndian, ev.projectID)
	h.Write(raw)
	uuid := event.CleanString(ev.event.UUID, 100)
	reason = event.CleanString(reason, 2000)
	tag, err := tx.Exec(ctx, `INSERT INTO dead_letters (project_id, event_uuid, sqlstate, reason, raw, raw_format, raw_digest, edge_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (raw_digest) DO NOTHING`,
		ev.projectID, uuid, event.CleanString(code, 20), reason, raw, format, h.Sum(nil), event.CleanString(ev.edgeID, event.MaxIDRunes))
	if err != nil {
		return fmt.Errorf("dead-letter event: %w", err)
	}
	if tag.RowsAffected() == 1 {
		res.DeadLetters = append(res.DeadLetters, controlplane.DeadLetter{ProjectID: ev.projectID, UUID: uuid, Code: code, Reason: reason})
	}
	return nil
}

// fallbackRaw encodes an event that did not come over the wire: a JSON object whose text
// fields are base64, so that any byte survives.
func fallbackRaw(e *controlplane.Event) []byte {
	raw, _ := json.Marshal(struct {
		UUID        []byte `json:"uuid"`
		Event       []byte `json:"event"`
		DistinctID  []byte `json:"distinct_id"`
		Properties  []byte `json:"properties"`
		TimestampUs int64  `json:"timestamp_us"`
		ReceivedUs  int64  `json:"received_us"`
	}{[]byte(e.UUID), []byte(e.Name), []byte(e.DistinctID), e.Properties, e.Timestamp.UnixMicro(), e.ReceivedAt.UnixMicro()})
	return raw
}

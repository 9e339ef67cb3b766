package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"time"
)

// The headers of every delivery.
const (
	// HeaderSignature is "t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>" under the hook's secret>".
	HeaderSignature = "X-Flagedge-Signature"
	// HeaderTimestamp repeats t: when this attempt was signed, in Unix seconds.
	HeaderTimestamp = "X-Flagedge-Timestamp"
	// HeaderEvent is the event's kind, e.g. feature_flag.updated.
	HeaderEvent = "X-Flagedge-Event"
	// HeaderEventID is the event's uuid: the same for every hook and every retry, the key a
	// receiver de-duplicates on.
	HeaderEventID = "X-Flagedge-Event-Id"
	// HeaderDelivery is the uuid of this hook's delivery of the event (the same on retries).
	HeaderDelivery = "X-Flagedge-Delivery"
)

// ReplayWindow is how old a signature's timestamp a receiver should accept: each attempt is
// signed afresh, so a genuine delivery is never older than the network's delay.
const ReplayWindow = 5 * time.Minute

// Sign returns the signature header's value for body sent at t.
func Sign(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + mac(secret, ts, body)
}

func mac(secret, ts string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts))
	m.Write([]byte("."))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// Verify reports whether header is a valid signature of body under secret, made within
// ReplayWindow of now: what a receiver written in Go does (docs/api.md shows it in other
// languages).
func Verify(secret, header string, body []byte, now time.Time) bool {
	var ts, sig string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sig = v
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || sig == "" {
		return false
	}
	if d := now.Sub(time.Unix(sec, 0)); d > ReplayWindow || d < -ReplayWindow {
		return false
	}
	return hmac.Equal([]byte(sig), []byte(mac(secret, ts, body)))
}

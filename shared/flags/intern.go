package flags

import (
	"encoding/json"
	"unique"
)

// interned is a string held once however many snapshots hold an equal one: an edge holds a
// snapshot of every project, and definitions repeat (the same targeting across projects, an
// unchanged flag in the next version of its project, compiled while the previous one still
// serves). The text lives as long as any snapshot holds it. The zero value is the empty text.
type interned struct {
	h unique.Handle[string]
}

// internJSON interns a definition's JSON without insignificant space (as given when it is
// not valid JSON: compilation reports that).
func internJSON(raw json.RawMessage) interned {
	if len(raw) == 0 {
		return interned{}
	}
	return interned{unique.Make(string(compactJSON(raw)))}
}

// internString interns s.
func internString(s string) interned {
	if s == "" {
		return interned{}
	}
	return interned{unique.Make(s)}
}

// String returns the text.
func (t interned) String() string {
	if t == (interned{}) {
		return ""
	}
	return t.h.Value()
}

// rawMessage returns the text as a new slice, for callers free to change it.
func (t interned) rawMessage() json.RawMessage {
	if t == (interned{}) {
		return nil
	}
	return json.RawMessage(t.String())
}

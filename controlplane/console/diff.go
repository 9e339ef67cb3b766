package console

import (
	"bytes"
	"encoding/json"
	"strings"
)

// diffLine is one line of a line diff: Op is ' ' (kept), '-' (removed) or '+' (added).
type diffLine struct {
	Op   string
	Text string
}

// maxDiffLines bounds the quadratic diff: filters longer than this are shown whole.
const maxDiffLines = 400

// describeChange renders one changed field: scalars as before → after, objects and lists as
// a line diff of their indented JSON.
func describeChange(field, action string, before, after json.RawMessage) changeView {
	cv := changeView{Field: field, Action: action}
	b, a := prettyJSON(before), prettyJSON(after)
	if strings.Contains(b, "\n") || strings.Contains(a, "\n") {
		cv.Lines = lineDiff(strings.Split(b, "\n"), strings.Split(a, "\n"))
		return cv
	}
	cv.Before, cv.After = b, a
	return cv
}

// prettyJSON indents a JSON value; a string holding JSON (as filters are recorded) is
// indented as that JSON.
// jsonOf is a changed value in its JSON form, as the activity log stores it.
func jsonOf(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return b
}

func prettyJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "null"
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if t := strings.TrimSpace(s); strings.HasPrefix(t, "{") || strings.HasPrefix(t, "[") {
			raw = json.RawMessage(t)
		} else {
			return s
		}
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	switch v.(type) {
	case map[string]any, []any:
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		_ = enc.Encode(v)
		return strings.TrimRight(buf.String(), "\n")
	}
	return jsonText(v)
}

// lineDiff is the longest-common-subsequence diff of two line lists.
func lineDiff(a, b []string) []diffLine {
	if len(a) > maxDiffLines || len(b) > maxDiffLines {
		var out []diffLine
		for _, l := range a {
			out = append(out, diffLine{"-", l})
		}
		for _, l := range b {
			out = append(out, diffLine{"+", l})
		}
		return out
	}
	// lcs[i][j] is the LCS length of a[i:] and b[j:].
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out []diffLine
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i] == b[j]:
			out = append(out, diffLine{" ", a[i]})
			i, j = i+1, j+1
		case lcs[i+1][j] >= lcs[i][j+1]:
			out = append(out, diffLine{"-", a[i]})
			i++
		default:
			out = append(out, diffLine{"+", b[j]})
			j++
		}
	}
	for ; i < len(a); i++ {
		out = append(out, diffLine{"-", a[i]})
	}
	for ; j < len(b); j++ {
		out = append(out, diffLine{"+", b[j]})
	}
	return out
}

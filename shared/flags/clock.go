package flags

// ReadsClock reports whether an answer of the snapshot may depend on when, or how fast, it is
// computed rather than on the request alone: some flag or cohort compares dates (a relative
// date such as "-7d" counts back from now, and a person value may be a relative date whatever
// the filter's), or matches a pattern only a backtracking engine compiles, which gives up after
// its time limit. An answer of such a snapshot is not reused for a later request.
func (s *Snapshot) ReadsClock() bool { return s.readsClock }

// readsClock reports whether the filter's answer may depend on the time of evaluation. Every
// such filter is a person or group filter (date and regex operators are for those alone), so
// the compiler's table of them (compiler.matchers) holds them all.
func (m *matcher) readsClock() bool {
	return m.op >= opDateBefore && m.op <= opDateExact || m.re != nil && m.re.back != nil
}

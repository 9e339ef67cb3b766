// Package flags is the feature-flag evaluation engine shared by the control plane and the
// edge: it parses flag definitions (filters), validates them, compiles a project's flags into
// an immutable snapshot, and evaluates that snapshot for one request exactly as PostHog does.
// It performs no I/O.
package flags

// Package layout holds no code: its test holds every package's imports to the dependency
// rules that docs/architecture.md draws ("Dependency rules"), so that a change that crosses
// one of those lines fails `make test` instead of waiting for a reader to notice.
package layout

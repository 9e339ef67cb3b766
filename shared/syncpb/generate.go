// Package syncpb holds the gRPC contract between the control plane and the edges
// (sync.proto) and its generated code, which is checked in. Regenerate with `make generate`.
package syncpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative sync.proto

package syncserver

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flagedge/flagedge/controlplane"
	"github.com/flagedge/flagedge/shared/syncpb"
)

// WithEvaluations makes the server store the flag evaluation counts edges report. Without it
// reports are accepted and dropped.
func WithEvaluations(store controlplane.EvaluationStore) Option {
	return func(s *Server) { s.evaluations = store }
}

// maxReported bounds one report: an edge reports what it counted over a few seconds, at most
// a few entries per flag (and what it kept while the control plane was away, bounded alike).
const maxReported = 100_000

// maxReportedText bounds a reported flag key or value (flag keys are at most 400 characters).
const maxReportedText = 400

// ReportEvaluations stores an edge's evaluation counts, for the projects it is served.
func (s *Server) ReportEvaluations(ctx context.Context, req *syncpb.ReportEvaluationsRequest) (*syncpb.ReportEvaluationsResponse, error) {
	if len(req.Evaluations) > maxReported {
		return nil, status.Errorf(codes.InvalidArgument, "at most %d counts per report", maxReported)
	}
	if s.evaluations == nil {
		return &syncpb.ReportEvaluationsResponse{}, nil
	}
	counts := make([]controlplane.EvaluationCount, 0, len(req.Evaluations))
	for _, e := range req.Evaluations {
		if e.Count <= 0 || e.FlagKey == "" || len(e.FlagKey) > maxReportedText || len(e.Value) > maxReportedText || !serves(ctx, e.ProjectId) {
			continue
		}
		counts = append(counts, controlplane.EvaluationCount{ProjectID: e.ProjectId, FlagKey: e.FlagKey, Value: e.Value, Count: e.Count})
	}
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	if err := s.evaluations.AddEvaluations(ctx, counts); err != nil {
		return nil, s.unavailable("report evaluations", err)
	}
	return &syncpb.ReportEvaluationsResponse{}, nil
}

package controlplane

import (
	"context"
	"time"

	"github.com/flagedge/flagedge/shared/flags"
)

// EvaluationCount is a number of evaluations of one flag to one value, as an edge reports
// them.
type EvaluationCount struct {
	ProjectID int64
	FlagKey   string
	Value     string
	Count     int64
}

// FlagUsage is how much a flag was evaluated recently.
type FlagUsage struct {
	// LastCalledAt is when edges last reported an evaluation of it; nil when never.
	LastCalledAt *time.Time
	// Last1d, Last7d and Last30d count its evaluations over the last 1, 7 and 30 days.
	Last1d, Last7d, Last30d int64
}

// DailyEvaluations is one day's evaluations of a flag (UTC).
type DailyEvaluations struct {
	Date  time.Time
	Count int64
}

// StaleAfter is how long a flag may go without an evaluation, or stay fully rolled out and
// unchanged, before it counts as stale.
const StaleAfter = 30 * 24 * time.Hour

// EvaluationStore keeps the evaluation counts the edges report.
type EvaluationStore interface {
	// AddEvaluations adds reported counts to the current hour.
	AddEvaluations(ctx context.Context, counts []EvaluationCount) error
	// FlagUsage returns the usage of the project's flags with the given keys (flags never
	// evaluated are missing from the map).
	FlagUsage(ctx context.Context, projectID int64, keys []string) (map[string]FlagUsage, error)
	// DailyEvaluations returns a flag's evaluations per day over the last days days, oldest
	// first, days without any included.
	DailyEvaluations(ctx context.Context, projectID int64, key string, days int) ([]DailyEvaluations, error)
}

// FullyRolledOut reports whether the flag gives everyone the same value: a condition without
// properties at 100 % (or without a rollout), and no variants or one at 100 %.
func (f *Flag) FullyRolledOut() bool {
	parsed, err := flags.ParseFilters(f.Filters)
	if err != nil {
		return false
	}
	everyone := false
	for _, c := range parsed.Groups {
		if len(c.Properties) == 0 && (c.RolloutPercentage == nil || *c.RolloutPercentage >= 100) {
			everyone = true
		}
	}
	if !everyone || parsed.Multivariate == nil || len(parsed.Multivariate.Variants) == 0 {
		return everyone
	}
	for _, v := range parsed.Multivariate.Variants {
		if v.RolloutPercentage >= 100 {
			return true
		}
	}
	return false
}

// Stale reports whether the flag counts as stale at now (FlagFilter.Stale's rule): older than
// StaleAfter, and either not evaluated within it, or active, fully rolled out and unchanged
// within it.
func (f *Flag) Stale(u FlagUsage, now time.Time) bool {
	since := now.Add(-StaleAfter)
	if !f.CreatedAt.Before(since) {
		return false
	}
	if u.LastCalledAt == nil || u.LastCalledAt.Before(since) {
		return true
	}
	return f.Active && f.UpdatedAt.Before(since) && f.FullyRolledOut()
}

package postgres

// MayHave exposes ActivePlans.mayHave to the external tests, which wait on what a replica's
// set knows rather than on time.
func (a *ActivePlans) MayHave(projectID int64) bool { return a.mayHave(projectID) }

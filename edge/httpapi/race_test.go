//go:build race

package httpapi_test

// raceEnabled: the race detector's shadow memory multiplies a process's resident size.
const raceEnabled = true

package daemon

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"
)

// Flags is a daemon's flag set in which every flag has an environment variable: registering a
// flag takes its variable's name, the variable overrides the default, and --help shows it.
// A flag without a variable cannot be written, so none is forgotten.
type Flags struct {
	*flag.FlagSet
	envErrs []error
}

// NewFlags returns an empty flag set that reports errors and usage on stderr.
func NewFlags(name string, stderr io.Writer) *Flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return &Flags{FlagSet: fs}
}

// String registers a string flag.
func (f *Flags) String(p *string, name, env, def, usage string) {
	f.StringVar(p, name, def, withEnv(usage, env))
	f.fromEnv(name, env)
}

// Duration registers a duration flag ("5s", "300ms").
func (f *Flags) Duration(p *time.Duration, name, env string, def time.Duration, usage string) {
	f.DurationVar(p, name, def, withEnv(usage, env))
	f.fromEnv(name, env)
}

// Int64 registers an integer flag.
func (f *Flags) Int64(p *int64, name, env string, def int64, usage string) {
	f.Int64Var(p, name, def, withEnv(usage, env))
	f.fromEnv(name, env)
}

// Int registers an integer flag for a count or a size that fits an int.
func (f *Flags) Int(p *int, name, env string, def int, usage string) {
	f.IntVar(p, name, def, withEnv(usage, env))
	f.fromEnv(name, env)
}

// Float64 registers a floating-point flag.
func (f *Flags) Float64(p *float64, name, env string, def float64, usage string) {
	f.Float64Var(p, name, def, withEnv(usage, env))
	f.fromEnv(name, env)
}

// Bool registers a boolean flag.
func (f *Flags) Bool(p *bool, name, env string, def bool, usage string) {
	f.BoolVar(p, name, def, withEnv(usage, env))
	f.fromEnv(name, env)
}

// Parse applies the environment, then args; a malformed environment value is an error that
// names its variable.
func (f *Flags) Parse(args []string) error {
	if err := errors.Join(f.envErrs...); err != nil {
		return err
	}
	return f.FlagSet.Parse(args)
}

func withEnv(usage, env string) string { return usage + " (env " + env + ")" }

// fromEnv sets flag name from the environment variable env when it is set.
func (f *Flags) fromEnv(name, env string) {
	if v, ok := os.LookupEnv(env); ok {
		if err := f.Set(name, v); err != nil {
			f.envErrs = append(f.envErrs, fmt.Errorf("%s=%q: %w", env, v, err))
		}
	}
}

// Package cli holds what gen's commands share: a flag set that reports to
// the command's standard error.
package cli

import (
	"flag"
	"fmt"
	"io"
)

// FlagSet returns the flags of command name: errors go to stderr, and its
// usage is the lines of usage, then the flags.
func FlagSet(name string, stderr io.Writer, usage ...string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		for _, l := range usage {
			fmt.Fprintln(stderr, l)
		}
		fs.PrintDefaults()
	}
	return fs
}

package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/shardfs/shardfs/layout"
)

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print shardfs's version, the commit it was built from, and the formats it reads",
		Long: `Version prints the module version and VCS commit this binary was built
from (go install and go build record them), the Go release, the order
versions it can compute (a job pins one with --order-version) and the
manifest formats it reads.`,
		Example: `  shardfs version`,
		Args:    cobra.NoArgs,
		Run: func(cmd *cobra.Command, args []string) {
			fmt.Fprintln(cmd.OutOrStdout(), versionLine())
		},
	}
}

// versionLine is one line that says what this binary is.
func versionLine() string {
	version, commit, dirty, goVersion := "(devel)", "unknown", "", "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		goVersion = bi.GoVersion
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && len(s.Value) >= 12:
				commit = s.Value[:12]
			case s.Key == "vcs.modified" && s.Value == "true":
				dirty = "+local changes"
			}
		}
	}
	return fmt.Sprintf("shardfs %s (commit %s%s, %s); order versions %d-%d, metadata formats 1 to 3",
		version, commit, dirty, goVersion, layout.MinOrderVersion, layout.OrderVersion)
}

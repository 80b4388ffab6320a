package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// referenceDate is the date the man pages carry. It is fixed, not the
// day they are generated, so that the reference is the same bytes on every
// machine and TestCLIReferenceIsCurrent can hold it to --help.
var referenceDate = time.Date(2026, time.November, 28, 0, 0, 0, 0, time.UTC)

// newGenDocsCmd is the hidden command that writes the command reference
// from the same command tree as --help: DIR/cli, a Markdown page per
// command, and DIR/man, a man page per command (section 1).
func newGenDocsCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "gendocs DIR",
		Short:  "write the command reference under DIR: DIR/cli (Markdown) and DIR/man (man pages)",
		Long:   "gendocs writes the command reference from the same commands, flags and help as --help: a Markdown page per command in DIR/cli and a man page per command in DIR/man. The repository keeps it in docs/: after a change to a command or a flag, run\n\n  go run ./cmd/shardfs gendocs docs\n\n(a test fails while docs/ is stale).",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return writeCLIReference(cmd.Root(), args[0])
		},
	}
}

// writeCLIReference writes root's reference under dir (cli/ and man/),
// replacing what those two directories held: a command that is gone
// leaves no page behind.
func writeCLIReference(root *cobra.Command, dir string) error {
	// The completion command is added when the binary runs (Execute); a
	// tree built in a test has it only if asked: the same pages either way.
	root.InitDefaultCompletionCmd()
	setNoAutoGenTag(root)
	cli, man := filepath.Join(dir, "cli"), filepath.Join(dir, "man")
	for _, d := range []string{cli, man} {
		if err := clearGenerated(d); err != nil {
			return err
		}
	}
	if err := doc.GenMarkdownTree(root, cli); err != nil {
		return fmt.Errorf("gendocs: the Markdown pages: %w", err)
	}
	header := &doc.GenManHeader{Title: "SHARDFS", Section: "1", Source: "shardfs", Manual: "shardfs manual", Date: &referenceDate}
	if err := doc.GenManTree(root, header, man); err != nil {
		return fmt.Errorf("gendocs: the man pages: %w", err)
	}
	return nil
}

// clearGenerated makes dir if needed and deletes the pages gendocs wrote
// there before (shardfs*.md and shardfs*.1), and nothing else.
func clearGenerated(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("gendocs: %w", err)
	}
	for _, pattern := range []string{"shardfs*.md", "shardfs*.1"} {
		old, err := filepath.Glob(filepath.Join(dir, pattern))
		if err != nil {
			return err
		}
		for _, f := range old {
			if err := os.Remove(f); err != nil {
				return fmt.Errorf("gendocs: %w", err)
			}
		}
	}
	return nil
}

func setNoAutoGenTag(c *cobra.Command) {
	c.DisableAutoGenTag = true
	for _, sub := range c.Commands() {
		setNoAutoGenTag(sub)
	}
}

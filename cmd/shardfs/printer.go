package main

import (
	"encoding/json"
	"io"

	"github.com/spf13/cobra"
)

// printer prints a command's report: as text for people, or with --json
// as one JSON document for scripts and CI jobs (as restic and etcdctl do),
// both from the same value, so the two never disagree on a number.
type printer struct {
	out  io.Writer
	json bool
}

// addJSONFlag gives cmd --json, and returns the printer it sets.
func addJSONFlag(cmd *cobra.Command) *printer {
	p := &printer{}
	cmd.Flags().BoolVar(&p.json, "json", false, "print the report as one JSON document (for scripts), not as text")
	return p
}

// print writes report: as JSON, or through text.
func (p *printer) print(report any, text func(io.Writer) error) error {
	if p.json {
		enc := json.NewEncoder(p.out)
		enc.SetIndent("", "  ")
		return enc.Encode(report)
	}
	return text(p.out)
}

// line writes one line of a report that streams (stats): with --json, one
// compact JSON document a line (JSON Lines).
func (p *printer) line(report any, text func(io.Writer) error) error {
	if p.json {
		return json.NewEncoder(p.out).Encode(report)
	}
	return text(p.out)
}

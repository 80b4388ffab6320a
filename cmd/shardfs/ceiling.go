package main

import (
	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/shardfs/shardfs/fs"
)

// newCeilingCmd mounts the FUSE ceiling used by the benchmarks: one
// in-memory file with the same mount settings as shardfs mount.
func newCeilingCmd(g *globals) *cobra.Command {
	var size string
	var readAheadKB int
	cmd := &cobra.Command{
		Use:    "ceiling-mount MOUNTPOINT",
		Short:  "Benchmarks only: mount one in-memory file with shardfs's FUSE settings",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := humanize.ParseBytes(size)
			if err != nil {
				return err
			}
			server, err := fs.Mount(args[0], fs.NewCeilingRoot(int64(n)), fs.MountOptions{Name: "ceiling", ReadAheadKB: readAheadKB, Logger: g.logger()})
			if err != nil {
				return err
			}
			go func() {
				<-cmd.Context().Done()
				server.Unmount()
			}()
			server.Wait()
			return nil
		},
	}
	cmd.Flags().StringVar(&size, "size", "512MiB", "file size")
	cmd.Flags().IntVar(&readAheadKB, "read-ahead-kb", 4096, "as for shardfs mount")
	return cmd
}

//go:build shardfs_testhooks

// The test build of the binary: go build -tags shardfs_testhooks. It adds
// what only tests and benchmarks use, so the shipped binary holds no test
// double: mount's hidden --inject-latency (every store wrapped in the
// fault-injecting store) and the FUSE ceiling command used by the benchmarks.
package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/fs"
	"github.com/shardfs/shardfs/internal/ceiling"
	"github.com/shardfs/shardfs/internal/faultstore"
)

// injectLatencyFlag is mount's hidden --inject-latency, in this build only.
var injectLatencyFlag string

func init() {
	mountFlagHooks = append(mountFlagHooks, func(fl *pflag.FlagSet, f *mountFlags) {
		fl.StringVar(&injectLatencyFlag, "inject-latency", "", "testing only: delay every store request, e.g. 20ms±10ms")
		fl.MarkHidden("inject-latency")
		fl.DurationVar(&versionCheckEvery, "version-check-every", 0, "testing only: how often the mount asks which version is current")
		fl.MarkHidden("version-check-every")
	})
	wrapStores = injectLatency
	testCommands = append(testCommands, newCeilingCmd)
}

// injectLatency wraps every store in the fault-injecting store with
// --inject-latency's delay, for stall measurements only.
func injectLatency(stores []backend.Store, f *mountFlags, log *slog.Logger) ([]backend.Store, error) {
	if injectLatencyFlag == "" {
		return stores, nil
	}
	d, j, err := parseLatency(injectLatencyFlag)
	if err != nil {
		return nil, err
	}
	for i, s := range stores {
		fs := faultstore.New(s)
		fs.SetDelay(d, j)
		stores[i] = fs
	}
	log.Warn("injecting store latency (testing only)", "delay", d, "jitter", j)
	return stores, nil
}

// parseLatency parses "20ms" or "20ms±10ms" (also "20ms+-10ms").
func parseLatency(s string) (d, jitter time.Duration, err error) {
	base, jit, ok := strings.Cut(strings.ReplaceAll(s, "+-", "±"), "±")
	if d, err = time.ParseDuration(base); err != nil {
		return 0, 0, fmt.Errorf("--inject-latency %q: %v", s, err)
	}
	if ok {
		if jitter, err = time.ParseDuration(jit); err != nil || jitter > d {
			return 0, 0, fmt.Errorf("--inject-latency %q: jitter must be a duration no larger than the delay", s)
		}
	}
	return d, jitter, nil
}

// newCeilingCmd mounts the FUSE ceiling used by the benchmarks: one
// in-memory file with the same mount settings as shardfs mount.
func newCeilingCmd(g *globals) *cobra.Command {
	var size, from string
	var readAheadKB, maxRequestKB int
	var directIO bool
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
			o := ceiling.Options{DirectIO: directIO}
			if from != "" {
				if o.From, err = os.Open(from); err != nil {
					return err
				}
				defer o.From.Close()
			}
			server, err := fs.Mount(args[0], ceiling.NewRoot(int64(n), o), fs.MountOptions{Name: "ceiling", ReadAheadKB: readAheadKB, MaxRequest: maxRequestKB << 10, Logger: g.logger()})
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
	cmd.Flags().IntVar(&maxRequestKB, "max-request-kb", 0, "largest FUSE read, KiB (0: 1 MiB)")
	cmd.Flags().BoolVar(&directIO, "direct-io", false, "as for shardfs mount: every read reaches the daemon")
	cmd.Flags().StringVar(&from, "from", "", "serve this file's bytes (one pread and a CRC32C per read) instead of memory")
	return cmd
}

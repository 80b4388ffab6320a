package main

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/shardfs/shardfs/csinode"
	"github.com/shardfs/shardfs/repository"
)

// csiDriverName is the CSI driver's name: the CSIDriver object's, and what
// a volume's "driver:" says.
const csiDriverName = "csi.shardfs.io"

// csiOwnedFlags are mount flags the plugin sets itself, so no volume
// attribute may: the daemon runs in the foreground under the plugin, reads
// its credentials from the file the plugin writes, and serves every user
// of every pod that binds it.
var csiOwnedFlags = map[string]bool{"daemon": true, "mkdir": true, "ready-file": true, "log-file": true, "config": true,
	"allow-other": true, "help": true}

// csiGlobalAttrs are the global flags a volume may set for its daemon.
var csiGlobalAttrs = []string{"stores", "request-timeout", "store-concurrency", "log-level", "log-format"}

func newCSICmd(g *globals) *cobra.Command {
	var endpoint, nodeID, stateDir, driverName string
	cmd := &cobra.Command{
		Use:   "csi --endpoint unix:///csi/csi.sock --node-id NODE",
		Short: "Serve the CSI node plugin: the kubelet mounts shardfs volumes through it",
		Long: `csi serves the Identity and Node services of the Container Storage
Interface on a unix socket, for the kubelet (with the node-driver-registrar
sidecar, examples/k8s/csi-node.yaml). A pod declares a volume of driver
` + csiDriverName + `, inline or as a PersistentVolume; its attributes are the
mount flags, by their names, plus:

  dataset   the dataset NAME (or give mix: NAME:W,...)
  stores    the store URLs, comma-separated, k+m of them, in order

for example  dataset: imagenet-train, stores: "s3://b0/ds,...",
world-size: "8", batch-size: "256", seed: "17", alpha: "0.5",
cache-size: "8GiB", cache-dir: /mnt/nvme/shardfs.

Every view shows every rank: a pod reads epochs/E/rank-$RANK, with RANK
from torchrun or the Job's completion index.

Pods on a node that publish the same attributes and secrets share one
mount daemon, with one cache and one disk tier, through bind mounts; the
last unpublish stops it. A daemon that dies is started again and its
target paths served again. Credentials come from the volume's secret
(keys access_key_id, secret_access_key, session_token) and reach the
daemon in a file under --state-dir that only root can read: never its
command line, environment or logs.

The plugin keeps its views in --state-dir, which must survive it (a
hostPath, with Bidirectional mount propagation). A plugin that is
restarted adopts the daemons still serving, clears the mounts of those
that are gone, and serves their target paths again.`,
		Example: `  shardfs csi --endpoint unix:///csi/csi.sock --node-id "$NODE_NAME"`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			// Resolved here, not as the flag's default: --help (and the
			// command reference generated from it) must not print the
			// name of the machine it ran on.
			if nodeID == "" {
				nodeID = os.Getenv("NODE_NAME")
			}
			if nodeID == "" {
				nodeID, _ = os.Hostname()
			}
			if nodeID == "" {
				return fmt.Errorf("--node-id: give the node's name (in a pod, from the downward API: spec.nodeName)")
			}
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("cannot find this program to start mount daemons: %w", err)
			}
			d, err := csinode.New(csinode.Config{DriverName: driverName, Version: versionLine(), NodeID: nodeID, StateDir: stateDir,
				MountCommand: []string{self, "mount"}, Args: csiArgs, Reword: csiReword, Logger: g.logger()})
			if err != nil {
				return err
			}
			return d.Run(cmd.Context(), endpoint)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&endpoint, "endpoint", "unix:///csi/csi.sock", "the unix socket the kubelet's registrar points at")
	fl.StringVar(&nodeID, "node-id", "", "this node's name, as the kubelet knows it (default $NODE_NAME, else the host name)")
	fl.StringVar(&stateDir, "state-dir", "/var/lib/kubelet/plugins/"+csiDriverName, "where views, their mounts, logs and credentials live: on the host, surviving the plugin")
	fl.StringVar(&driverName, "driver-name", csiDriverName, "the driver's name, as in the CSIDriver object")
	return cmd
}

// csiArgs turns a volume's attributes into mount arguments: each one is
// set on a fresh mount command's own flags, so it is parsed by the same
// code as on the command line, and its error names the attribute. The
// arguments are sorted, so equal attributes make equal views.
func csiArgs(attrs map[string]string) ([]string, error) {
	g := &globals{}
	f := &mountFlags{}
	mc := mountCmd(g, f)
	root := newRoot()
	lookup := func(name string) *pflag.Flag {
		if csiOwnedFlags[name] {
			return nil
		}
		if fl := mc.Flags().Lookup(name); fl != nil {
			return fl
		}
		for _, a := range csiGlobalAttrs {
			if a == name {
				return root.PersistentFlags().Lookup(name)
			}
		}
		return nil
	}
	keys := make([]string, 0, len(attrs))
	for k := range attrs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var args []string
	name := ""
	for _, k := range keys {
		v := attrs[k]
		if k == "dataset" {
			// A name starts with a letter or digit, so it can never be
			// read as a flag (dataset: --mix=... was).
			if err := repository.CheckName(v); v != "" && err != nil {
				return nil, fmt.Errorf("volume attribute dataset: %v", err)
			}
			name = v
			continue
		}
		fl := lookup(k)
		if fl == nil {
			return nil, fmt.Errorf("volume attribute %q is not known: the attributes are dataset, %s and the mount flags by name (shardfs mount --help), such as batch-size, seed, alpha, cache-size", k, strings.Join(csiGlobalAttrs, ", "))
		}
		if err := fl.Value.Set(v); err != nil {
			return nil, fmt.Errorf("volume attribute %s=%q: %v", k, v, csiReword(err.Error()))
		}
		args = append(args, "--"+k+"="+v)
	}
	switch {
	case attrs["stores"] == "":
		return nil, fmt.Errorf("volume attribute stores is required: the store URLs, comma-separated, k+m of them in order")
	case name == "" && f.order.mix == "":
		return nil, fmt.Errorf("volume attribute dataset is required: the dataset's name (or give mix: NAME:W,...)")
	case name != "" && f.order.mix != "":
		return nil, fmt.Errorf("volume attributes dataset and mix: give one (a mix names its datasets)")
	}
	if err := checkGlobals(root); err != nil {
		return nil, fmt.Errorf("volume attributes: %s", csiReword(err.Error()))
	}
	if _, err := checkMountFlags(f); err != nil {
		return nil, fmt.Errorf("volume attributes: %s", csiReword(err.Error()))
	}
	if _, err := f.order.spec(); err != nil {
		return nil, fmt.Errorf("volume attributes: %s", csiReword(flagWorded(err).Error()))
	}
	args = append(args, "--allow-other")
	if name != "" {
		args = append(args, name)
	}
	return args, nil
}

var flagName = regexp.MustCompile(`--([a-z][a-z0-9-]*)`)

// csiReword names attributes where a message names flags: "--batch-size"
// is the attribute batch-size.
func csiReword(msg string) string {
	return flagName.ReplaceAllString(msg, "$1")
}

// checkGlobals checks the global flags a volume may set, as the daemon
// would at its start.
func checkGlobals(root *cobra.Command) error {
	pf := root.PersistentFlags()
	if d, _ := pf.GetDuration("request-timeout"); d <= 0 {
		return fmt.Errorf("--request-timeout %v: must be positive, e.g. 10s", d)
	}
	if n, _ := pf.GetInt("store-concurrency"); n < 1 {
		return fmt.Errorf("--store-concurrency %d: must be at least 1", n)
	}
	return root.PersistentPreRunE(root, nil)
}

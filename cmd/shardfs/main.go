// Command shardfs ingests labelled datasets into erasure-coded object
// stores, verifies and repairs them, and mounts them as directories of
// stratified epoch and batch files. It parses and reports: flags, config,
// credentials, logging, progress, signals and exit codes live here; the
// order flags become a layout.Spec (plan.go) and a mount's flags a
// mount.Config (mount.go), and package mount assembles the mount.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardfs/shardfs/backend"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := execute(ctx, os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "shardfs:", err)
	}
	os.Exit(exitCode(err))
}

// execute runs the command args name. Then it takes back the file://
// store directories it made that hold nothing (a list, verify or failed
// command run on a path that was not there leaves it as it found it).
func execute(ctx context.Context, args []string) error {
	g := &globals{}
	root := newRootFor(g)
	root.SetArgs(args)
	defer g.takeBackEmptyStores()
	return flagWorded(withCPUProfile(func() error { return root.ExecuteContext(ctx) }))
}

// withCPUProfile runs f, writing a CPU profile of it to the file
// $SHARDFS_CPU_PROFILE names, if any, and a heap profile (allocations
// since the start, and what the last GC found live) to the file
// $SHARDFS_MEM_PROFILE names: how ingest, verify or a mount spend their CPU
// and memory, for "go tool pprof" (developers' switches, not flags).
func withCPUProfile(f func() error) error {
	if mem := os.Getenv("SHARDFS_MEM_PROFILE"); mem != "" {
		defer func() {
			if out, err := os.Create(mem); err == nil {
				pprof.Lookup("allocs").WriteTo(out, 0)
				out.Close()
			}
		}()
	}
	path := os.Getenv("SHARDFS_CPU_PROFILE")
	if path == "" {
		return f()
	}
	out, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("SHARDFS_CPU_PROFILE: %w", err)
	}
	defer out.Close()
	if err := pprof.StartCPUProfile(out); err != nil {
		return fmt.Errorf("SHARDFS_CPU_PROFILE: %w", err)
	}
	defer pprof.StopCPUProfile()
	return f()
}

// globals are the flags every subcommand shares.
type globals struct {
	stores         string
	configPath     string
	logLevel       string
	logFormat      string
	requestTimeout time.Duration
	// storeConcurrency bounds the requests in flight to one store.
	storeConcurrency int

	mu     sync.Mutex
	opened []backend.Store // every store the command opened
}

// takeBackEmptyStores removes the directories that opening a file:// store
// made, where they hold nothing now (backend.RemoveIfEmpty: only empty
// directories this process made go). A command's stores stay as it found
// them unless it wrote to them.
func (g *globals) takeBackEmptyStores() {
	g.mu.Lock()
	defer g.mu.Unlock()
	// Last opened first: stores that share a new parent directory made it
	// when the first of them was opened, and it empties when the others
	// have gone.
	for i := len(g.opened) - 1; i >= 0; i-- {
		backend.RemoveIfEmpty(context.Background(), g.opened[i], false)
	}
}

func newRoot() *cobra.Command { return newRootFor(&globals{}) }

// newRootFor is the command tree, its shared flags in g.
func newRootFor(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "shardfs",
		Short: "Erasure-coded, stratified datasets from object storage, as plain files",
		Long: `shardfs packs a labelled dataset into shards, erasure-codes them RS(k,m)
across k+m object stores (each store a failure domain), and serves them back
verified: every byte is checked against a checksum written at ingest.

Stores are URLs:
  file:///data/store0                 a local directory (no server needed)
  s3://bucket/prefix                  S3; endpoint from AWS_ENDPOINT_URL
  http://127.0.0.1:9000/bucket/prefix a path-style endpoint such as MinIO

Credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY /
AWS_SESSION_TOKEN, the AWS shared credentials file, or the shardfs config
file. They are never accepted in argv and never printed.

The stores come from --stores, else SHARDFS_STORES, else the config file
(--config, else SHARDFS_CONFIG, else ~/.config/shardfs/config.json):

  {"stores": ["http://10.0.0.1:9000/b0/ds", "http://10.0.0.2:9000/b1/ds"],
   "credentials": {"default": {"access_key_id": "...", "secret_access_key": "..."},
                   "10.0.0.2:9000": {"access_key_id": "...", "secret_access_key": "..."}}}

Credentials are looked up by the store's host:port, then "default", then
the AWS environment and shared credentials file.

Start with:  shardfs demo            Check a node with:  shardfs doctor NAME`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(g.logLevel)); err != nil {
				return fmt.Errorf("--log-level %q: use debug, info, warn or error", g.logLevel)
			}
			if g.logFormat != "text" && g.logFormat != "json" {
				return fmt.Errorf("--log-format %q: use text, or json for a log collector (one JSON object a line)", g.logFormat)
			}
			return nil
		},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.stores, "stores", "", "comma-separated store URLs, k+m of them, in order (or SHARDFS_STORES, or \"stores\" in the config file)")
	pf.StringVar(&g.configPath, "config", "", "config file (default $SHARDFS_CONFIG or ~/.config/shardfs/config.json)")
	pf.StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	pf.StringVar(&g.logFormat, "log-format", "text", "log format: text (key=value), or json (one object a line, for a log collector)")
	pf.DurationVar(&g.requestTimeout, "request-timeout", backend.DefaultRequestTimeout,
		"bound on one store request (plus 1s per MB moved): a store that hangs costs at most this, once")
	pf.IntVar(&g.storeConcurrency, "store-concurrency", backend.DefaultStoreConcurrency,
		"most requests in flight to one store; more wait in shardfs, and hedges go to stores that are not queueing.\n"+
			"A mount's prefetch keeps as many GETs in flight as its readers' demand needs at the stores' latency, up to this × the stores, less 32 for reads that wait")
	// shardfs --version, as most tools answer it: the version command's line.
	root.Version = versionLine()
	root.SetVersionTemplate("{{.Version}}\n")
	root.AddCommand(newIngestCmd(g), newCommitCmd(g), newVerifyCmd(g), newRepairCmd(g), newPlanCmd(g), newMountCmd(g), newStatsCmd(), newDemoCmd(g), newWarmCmd(g), newVersionCmd(), newDoctorCmd(g), newListCmd(g), newVersionsCmd(g), newRollbackCmd(g), newGCCmd(g), newMigrateCmd(g), newHealCmd(g), newCSICmd(g), newReportCmd(g), newDeleteCmd(g), newGenDocsCmd())
	for _, c := range testCommands {
		root.AddCommand(c(g))
	}
	showUsageOnArgs(root)
	return root
}

// showUsageOnArgs makes every command's refusal of its arguments end with
// how the command is called: cobra's "accepts 1 arg(s), received 0" alone
// does not say which argument is missing.
func showUsageOnArgs(cmd *cobra.Command) {
	if check := cmd.Args; check != nil {
		cmd.Args = func(c *cobra.Command, args []string) error {
			if err := check(c, args); err != nil {
				return fmt.Errorf("%w (usage: %s)", err, c.UseLine())
			}
			return nil
		}
	}
	for _, sub := range cmd.Commands() {
		showUsageOnArgs(sub)
	}
}

func (g *globals) logger() *slog.Logger {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(g.logLevel)); err != nil {
		lvl = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: lvl}
	if g.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

// config is the optional config file:
//
//	{"stores": ["http://10.0.0.1:9000/b0", ...],
//	 "credentials": {"default": {"access_key_id": "...", "secret_access_key": "..."},
//	                 "10.0.0.3:9000": {...}}}
//
// Credentials are looked up by the store's host:port, then "default", then
// the AWS environment.
type config struct {
	Stores      []string                       `json:"stores"`
	Credentials map[string]backend.Credentials `json:"credentials"`
}

func (g *globals) loadConfig() (*config, error) {
	name := g.configPath
	explicit := name != ""
	if name == "" {
		name = os.Getenv("SHARDFS_CONFIG")
		explicit = name != ""
	}
	if name == "" {
		home, _ := os.UserHomeDir()
		name = filepath.Join(home, ".config", "shardfs", "config.json")
	}
	b, err := os.ReadFile(name)
	if err != nil {
		if !explicit && errors.Is(err, os.ErrNotExist) {
			return &config{}, nil
		}
		return nil, fmt.Errorf("config %s: %w", name, err)
	}
	var c config
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("config %s: %v: expected {\"stores\": [...], \"credentials\": {...}}", name, err)
	}
	return &c, nil
}

// openStores resolves --stores, SHARDFS_STORES or the config file, and opens them.
func (g *globals) openStores() ([]backend.Store, error) {
	cfg, err := g.loadConfig()
	if err != nil {
		return nil, err
	}
	var urls []string
	switch {
	case g.stores != "":
		urls = strings.Split(g.stores, ",")
	case os.Getenv("SHARDFS_STORES") != "":
		urls = strings.Split(os.Getenv("SHARDFS_STORES"), ",")
	default:
		urls = cfg.Stores
	}
	if len(urls) == 0 {
		return nil, errors.New("no stores: pass --stores URL,URL,... (k+m of them), set SHARDFS_STORES, or list \"stores\" in the config file")
	}
	return g.openURLs(cfg, urls)
}

// openURLs opens stores by URL, with the config file's credentials for
// their hosts, each behind the request timeout and the concurrency limit.
func (g *globals) openURLs(cfg *config, urls []string) ([]backend.Store, error) {
	for i, u := range urls {
		if strings.TrimSpace(u) == "" {
			return nil, fmt.Errorf("store %d of the %d URLs given is empty: look for two commas in a row, or one at either end", i, len(urls))
		}
	}
	if g.storeConcurrency < 1 {
		return nil, fmt.Errorf("--store-concurrency %d: must be at least 1, e.g. %d", g.storeConcurrency, backend.DefaultStoreConcurrency)
	}
	if g.requestTimeout <= 0 {
		return nil, fmt.Errorf("--request-timeout %v: must be positive, e.g. 10s", g.requestTimeout)
	}
	creds := func(u string) *backend.Credentials {
		parsed, err := url.Parse(u)
		if err != nil || cfg.Credentials == nil {
			return nil
		}
		if c, ok := cfg.Credentials[parsed.Host]; ok {
			return &c
		}
		if c, ok := cfg.Credentials["default"]; ok {
			return &c
		}
		return nil
	}
	stores, err := backend.OpenStack(urls, creds, backend.StackOptions{RequestTimeout: g.requestTimeout, Concurrency: g.storeConcurrency})
	if err == nil {
		g.mu.Lock()
		g.opened = append(g.opened, stores...)
		g.mu.Unlock()
	}
	return stores, err
}

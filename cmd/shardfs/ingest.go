package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/erasure"
	"github.com/shardfs/shardfs/ingest"
	"github.com/shardfs/shardfs/manifest"
	"github.com/shardfs/shardfs/repository"
)

type ingestFlags struct {
	data, parity int
	shardSize    string
	blockSize    string
	seed         uint64
	force        bool
	dryRun       bool // read the source and print the plan only
	// noCreateBuckets: a missing bucket is an error, not created.
	noCreateBuckets bool
	labelFields     []string
	label           string   // records: the field the model learns
	strata          []string // records: the fields that make strata besides
	maxRecord       string   // records: the largest record accepted
	stream          bool     // records: read once, a chunk at a time
	members         []string // a JSONL corpus: FIELD=NAME, fields made members
	keyField        string   // a JSONL corpus: the field that keys a record
	// openSource opens a source given as a store URL (WebDataset shards
	// on S3), with the stores' credentials.
	openSource  func(url string) (backend.Store, error)
	timeBuckets []string
	bins        []string
	followLinks bool
	part, job   string
	format      int
	groupShards int
	// appendTo adds SRC to the existing dataset as a new version;
	// skipExisting leaves out the samples whose key it holds.
	appendTo, skipExisting bool
}

// defaultMaxRecordSize is --max-record-size's default: a record must fit
// one shard, at most 2GiB-1.
const defaultMaxRecordSize = "2147483647B"

func newIngestCmd(g *globals) *cobra.Command {
	f := &ingestFlags{}
	f.openSource = func(url string) (backend.Store, error) {
		cfg, err := g.loadConfig()
		if err != nil {
			return nil, err
		}
		st, err := g.openURLs(cfg, []string{url})
		if err != nil {
			return nil, err
		}
		return st[0], nil
	}
	cmd := &cobra.Command{
		Use:   "ingest --stores URL,... --data K --parity M SRC NAME",
		Short: "Pack, erasure-code and upload a labelled dataset, then commit it",
		Long: `Ingest reads SRC, places its samples into shards by a seeded stratified
shuffle (so every shard mirrors the class mix), encodes each shard RS(K,M)
into K data and M parity fragments on the K+M stores, and commits the dataset
by writing its manifest to every store last.

SRC is an ImageFolder tree SRC/<class>/<file...> (the class is the first
directory), WebDataset tar shards (a directory of .tar files, one .tar, a
quoted glob such as 'shards/*.tar', or a store URL such as
http://host:9000/bucket/shards whose .tar objects are read with ranged GETs
and the stores' credentials; each shard may be gzip-compressed, .tar.gz or
.tgz), or a listing: a .csv of path,label (an optional header row
"path,label[,field...]" names the columns; the stratum is the label column
unless --label-fields names others) or a .jsonl of {"path": ..., "label": ...}.
Listed paths are relative to the listing's directory. Keys are the relative
paths. Labels have at most 200 bytes.

WebDataset shards hold records: members that share a key (000123.jpg,
000123.txt, 000123.json), grouped as WebDataset groups them. Every member
is stored and served together with its record: batch tars hold
<key>.<member> for each, in order. A record's fields are its .json
member's keys: --label FIELD names what the model learns (the batches'
<key>.cls), --strata FIELD,... what else batches balance, and --bins and
--time-bucket cut fields as for listings; a corpus may have no label and
be balanced by --strata alone. A damaged tar, a member without a key, a
key used by two records (also a record split across two shards) or a
.json member that is not an object is refused, naming the shard and the
offset, and nothing is committed.

A .jsonl corpus of documents is a source of records too: --member
text=txt makes each line's "text" the record's .txt (byte for byte, as
UTF-8), and the line's other fields its .json and the fields --label and
--strata name, e.g. --member text=txt --strata source. A line that is not
a JSON object is refused, naming the line.

A listing's other fields (strings, numbers, timestamps) are kept with each
sample: index.csv shows them. Strata can be cut from them too, added to the
label fields' tuple: --time-bucket time=30d cuts a timestamp (RFC 3339 or
Unix seconds) into 30-day buckets, and --bins len=8 cuts a number into 8
quantile ranges computed from the data (or --bins len=0,128,512,2048 into
explicit ones). A mount can then weight the time buckets by age
(--recency-half-life) or read only the newest (--time-window). A symbolic link that leads out of SRC
is refused unless --follow-symlinks is given.

Interrupting an ingest (even kill -9) leaves no visible dataset; run the same
command again. An existing NAME is only replaced with --force, which makes
the new content its next version; the replaced versions stay on the stores
(shardfs versions lists them) until shardfs gc removes them.

Append: --append adds SRC's samples to the existing dataset NAME as its next
version. Only the new samples are uploaded, into new shards; the objects of
earlier versions are never rewritten. SRC must describe its samples as NAME
does (same label fields and fields; the dataset's time buckets and bins are
reused); new classes are fine, and enter the order as any class does, by
their counts. A key NAME holds already is refused, naming the first few,
unless --skip-existing leaves those samples out. The erasure code, block
size and metadata format are the dataset's. A large append can be split
like an ingest: --append --part I/N on N machines, then shardfs commit NAME;
the parts must all read the same current version, and the commit refuses if
another version became current meanwhile. Interrupting an append leaves the
previous version current and whole. Mounts take the current version when
they start (shardfs mount --version N for another).

Distributed ingest: run the same command with --part I/N on N machines (or
--part auto in a Kubernetes Indexed Job or a Slurm job array). A part of
WebDataset shards (streamed) reads only its slice of them, the I-th of N
runs of the shards in name order, and writes shards of its own; the commit
numbers the strata by name and refuses a key two parts' records share.
--bins then needs its edges given. A part of any other source scans all of
it and uploads and reads back the shards it owns, with no coordination,
since the placement is a pure function of the listing and the seed. Then
run "shardfs commit NAME" once: it checks every fragment of every part and
commits. Until then nothing is visible; a part that dies is simply rerun.
Every part must see the same SRC and options. --job (or SHARDFS_JOB_ID, or
SLURM_ARRAY_JOB_ID) names the run, so a later run over a changed source
never writes over this one's fragments.`,
		Example: `  shardfs ingest --stores file:///srv/s0,file:///srv/s1,file:///srv/s2 --data 2 --parity 1 ./train train
  AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... shardfs ingest \
    --stores http://10.0.0.1:9000/ds,http://10.0.0.2:9000/ds,... --data 4 --parity 2 ./imagenet/train imagenet-train
  # on 4 machines, I = 0..3, then once: shardfs commit imagenet-train --stores ...
  shardfs ingest --stores ... --data 4 --parity 2 --part I/4 --job run-7 /data/imagenet/train imagenet-train
  # strata of label x month x 8 ranges of the sequence length, from a listing
  # of {"path": ..., "label": ..., "time": "2026-03-01T12:00:00Z", "len": 412}
  shardfs ingest --stores ... --time-bucket time=30d --bins len=8 ./logs.jsonl logs
  # add this week's samples as the next version
  shardfs ingest --stores ... --append ./week-48 train`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.dryRun {
				// The stores are not opened: a file:// store would
				// create its directory.
				if f.appendTo || cmd.Flags().Changed("part") {
					return fmt.Errorf("--dry-run plans a whole ingest: leave out --append and --part")
				}
				return runDryRun(cmd.Context(), g.logger(), cmd.OutOrStdout(), f, args[0], args[1])
			}
			stores, err := g.openStores()
			if err != nil {
				return err
			}
			created := make([]bool, len(stores))
			defer func() {
				if err != nil {
					takeBack(cmd.OutOrStdout(), stores, created)
				}
			}()
			if !f.noCreateBuckets {
				if err = createBuckets(cmd.Context(), cmd.OutOrStdout(), stores, created); err != nil {
					return err
				}
			}
			switch {
			case f.appendTo:
				err = runAppend(cmd, g.logger(), stores, f, args[0], args[1])
			case f.skipExisting:
				err = fmt.Errorf("--skip-existing applies to --append")
			case cmd.Flags().Changed("part"):
				err = runIngestPart(cmd.Context(), g.logger(), cmd.OutOrStdout(), stores, f, args[0], args[1])
			case f.job != "":
				err = fmt.Errorf("--job names a distributed ingest: use it with --part I/N")
			default:
				_, err = runIngest(cmd.Context(), g.logger(), cmd.OutOrStdout(), stores, f, args[0], args[1])
			}
			return err
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&f.data, "data", 4, "data fragments per shard (k)")
	fl.IntVar(&f.parity, "parity", 2, "parity fragments per shard (m): up to m stores may fail")
	fl.StringVar(&f.shardSize, "shard-size", "64MiB", "target shard size")
	fl.StringVar(&f.blockSize, "block-size", "64KiB", "checksum block size (at most 1MiB); smaller blocks read less beyond each sample")
	fl.Uint64Var(&f.seed, "seed", 0, "seed of the stratified placement into shards")
	fl.BoolVar(&f.force, "force", false, "replace an existing dataset of the same name")
	fl.BoolVar(&f.dryRun, "dry-run", false, "read SRC and say what the ingest would write (samples, strata, shards, bytes), writing nothing to the stores")
	fl.BoolVar(&f.noCreateBuckets, "no-create-buckets", false, "fail on an S3 store whose bucket does not exist, instead of creating it")
	fl.StringSliceVar(&f.labelFields, "label-fields", nil, "listing fields that form the stratum, e.g. class,site (listings only; default: the field named label, or a CSV's only column besides path; other columns are ignored)")
	fl.StringVar(&f.label, "label", "", "records (WebDataset shards): the field of each record's .json member the model learns; a batch's <key>.cls is its class (none: no .cls)")
	fl.StringArrayVar(&f.members, "member", nil, "a .jsonl corpus of records: FIELD=NAME makes each line's string FIELD the record's <key>.NAME member, e.g. text=txt; the other fields go to its .json; repeatable")
	fl.StringVar(&f.keyField, "key", "", "a .jsonl corpus: the field that keys each record (default: its line number)")
	fl.StringVar(&f.maxRecord, "max-record-size", defaultMaxRecordSize, "records: refuse a record larger than this, naming its shard (a record must fit one shard: at most 2GiB-1)")
	fl.StringSliceVar(&f.strata, "strata", nil, "records: fields of each record's .json member that make strata besides the label, e.g. source,lang (every batch mirrors their mix)")
	fl.StringArrayVar(&f.timeBuckets, "time-bucket", nil, "FIELD=SPAN: add to the stratum the bucket of a timestamp field, e.g. time=30d (units s, m, h, d, w; buckets align to Unix time 0); repeatable")
	fl.StringArrayVar(&f.bins, "bins", nil, "FIELD=N or FIELD=E0,E1,...: add to the stratum the range of a numeric field, N quantile ranges of the data or explicit edges, e.g. len=8 or len=0,128,512,2048; repeatable")
	fl.BoolVar(&f.stream, "stream", true, "records (WebDataset shards, a .jsonl corpus): read the source once, a chunk at a time (4 shards' bytes of records, or 4,096 records once it holds a shard's bytes), and upload each chunk as it is read, so memory stays flat however many records there are. A source of one chunk is placed whole, as without it. Each chunk's shards mirror the chunk's stratum mix (the mount's batches mirror the whole mix either way), strata are numbered as they first appear, the first chunk's records fix the fields, and the metadata is format 2 (--format 3 also). --stream=false reads the source whole first, holding about 600 bytes a record, to place each shard from the whole source's mix, or to cut --bins N at the quantiles of every record, where a stream cuts them at its first chunk's (the outer bins take the values beyond, their edges widened to them)")
	fl.BoolVar(&f.followLinks, "follow-symlinks", false, "follow symbolic links that lead out of SRC (links inside SRC are always followed); without it such a link is refused")
	fl.StringVar(&f.part, "part", "", "run part I/N of a distributed ingest (then run shardfs commit): of WebDataset shards, read only the I-th of N slices of them; of a .jsonl corpus keyed by --key, only the lines that start in the I-th of N runs of its bytes; of another source, upload part I/N of its shards; \"auto\" reads JOB_COMPLETION_INDEX/JOB_COMPLETIONS or SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT")
	fl.IntVar(&f.format, "format", 0, fmt.Sprintf("metadata format. 2: a top-level manifest of per-shard class counts plus an index object per shard on every store; a mount computes the order from the counts and fetches a shard's index when the shard is first needed, so a node holds about the rows its ranks read. 1: one manifest with a row per sample, read whole by every node (about 100 bytes a sample); shards interleave their classes, so --window reads fewer, larger ranges. 3: format 2's index objects under a root of per-group class counts (a few bytes a shard, what every node reads) and a group object per 1,024 shards (--group-shards), for datasets of millions of shards; a mount reads a group object when its ranks first read one of its samples. 0 (default): 2 from %d samples up, else 1", format2From))
	fl.IntVar(&f.groupShards, "group-shards", manifest.DefaultGroupShards, fmt.Sprintf("with --format 3: shards per group object, 1 to %d. A mount reads the group objects holding the samples its ranks read: smaller groups are more objects, each read by fewer nodes", manifest.MaxGroupShards))
	fl.BoolVar(&f.appendTo, "append", false, "add SRC's samples to the existing dataset NAME as its next version (uploads only the new samples)")
	fl.BoolVar(&f.skipExisting, "skip-existing", false, "with --append: leave out the samples whose key NAME holds already, instead of refusing the append")
	fl.StringVar(&f.job, "job", "", "name of this distributed ingest run, the same for all its parts (default: $SHARDFS_JOB_ID, else $SLURM_ARRAY_JOB_ID)")
	return cmd
}

// format2From is the listing size from which ingest writes metadata format
// 2 unless told: below it, every node holding the whole manifest (about 100
// bytes a sample) costs little, and format 1's shards, which interleave
// their classes, let --window read fewer, larger ranges (about 30% fewer
// GETs measured for a 3,000-sample dataset, BENCHMARKS.md).
const format2From = 1_000_000

// ingestOptions parses the size flags and scans the source.
func ingestOptions(f *ingestFlags, src, name string, stores []backend.Store, log *slog.Logger) (*ingest.Source, ingest.Options, error) {
	so, opts, err := ingestFlagOptions(f, src, name, stores, log)
	if err != nil {
		return nil, ingest.Options{}, err
	}
	var source *ingest.Source
	if so.Store != nil {
		source, err = ingest.ScanStore(context.Background(), so)
	} else {
		source, err = ingest.ScanWith(src, so)
	}
	if err != nil {
		return nil, ingest.Options{}, err
	}
	printSourceNotes(src, source.Warnings, source.Symlinks, source.Outside)
	if opts.Format == 0 {
		// A pure function of the listing, so every part of a distributed
		// ingest chooses the same.
		opts.Format = 1
		if len(source.Items) >= format2From {
			opts.Format = 2
		}
	}
	opts.ReleaseSource = true // each command scans its source for one plan
	return source, opts, nil
}

// printSourceNotes says what a scan noticed but accepted.
func printSourceNotes(src string, warnings []string, symlinks, outside int) {
	for _, w := range warnings {
		fmt.Fprintf(os.Stderr, "warning: source %s: %s\n", src, w)
	}
	if symlinks > 0 {
		fmt.Fprintf(os.Stderr, "source %s: followed %d symbolic links, %d of them out of the source\n", src, symlinks, outside)
	}
}

// ingestFlagOptions parses the flags into what a scan and an ingest take;
// a store URL as the source is opened (so.Store). Format is the flag's (0:
// choose).
func ingestFlagOptions(f *ingestFlags, src, name string, stores []backend.Store, log *slog.Logger) (ingest.ScanOptions, ingest.Options, error) {
	shardSize, err := humanize.ParseBytes(f.shardSize)
	if err != nil {
		return ingest.ScanOptions{}, ingest.Options{}, fmt.Errorf("--shard-size %q: %v (use e.g. 64MiB)", f.shardSize, err)
	}
	blockSize, err := humanize.ParseBytes(f.blockSize)
	if err != nil || blockSize > erasure.MaxBlockSize {
		return ingest.ScanOptions{}, ingest.Options{}, fmt.Errorf("--block-size %q: use a size up to 1MiB, e.g. 64KiB", f.blockSize)
	}
	if f.format < 0 || f.format > 3 {
		return ingest.ScanOptions{}, ingest.Options{}, fmt.Errorf("--format %d: use 1, 2 or 3, or 0 to choose by the dataset's size", f.format)
	}
	so := ingest.ScanOptions{LabelFields: f.labelFields, FollowSymlinks: f.followLinks, Label: f.label, Strata: f.strata}
	maxRecord, err := humanize.ParseBytes(f.maxRecord)
	if err != nil || maxRecord == 0 || maxRecord > manifest.MaxShardSize {
		return ingest.ScanOptions{}, ingest.Options{}, fmt.Errorf("--max-record-size %q: use a size from 1B to 2GiB-1, e.g. 256MiB", f.maxRecord)
	}
	so.MaxRecordSize = int64(maxRecord)
	for _, v := range f.members {
		mf, err := ingest.ParseMemberField(v)
		if err != nil {
			return ingest.ScanOptions{}, ingest.Options{}, err
		}
		so.Members = append(so.Members, mf)
	}
	so.KeyField = f.keyField
	for _, v := range f.timeBuckets {
		tb, err := ingest.ParseTimeBucket(v)
		if err != nil {
			return ingest.ScanOptions{}, ingest.Options{}, err
		}
		so.TimeBuckets = append(so.TimeBuckets, tb)
	}
	for _, v := range f.bins {
		b, err := ingest.ParseBins(v)
		if err != nil {
			return ingest.ScanOptions{}, ingest.Options{}, err
		}
		so.Bins = append(so.Bins, b)
	}
	if f.groupShards < 1 || f.groupShards > manifest.MaxGroupShards {
		return ingest.ScanOptions{}, ingest.Options{}, fmt.Errorf("--group-shards %d: use 1 to %d", f.groupShards, manifest.MaxGroupShards)
	}
	if f.groupShards != manifest.DefaultGroupShards && f.format != 3 {
		return ingest.ScanOptions{}, ingest.Options{}, fmt.Errorf("--group-shards %d: group objects are written in metadata format 3 only; add --format 3", f.groupShards)
	}
	if strings.HasPrefix(src, "http://") || strings.HasPrefix(src, "https://") {
		// WebDataset shards on a store: its .tar objects, read with
		// ranged GETs.
		if so.Store, err = f.openSource(src); err != nil {
			return ingest.ScanOptions{}, ingest.Options{}, fmt.Errorf("source %s: %w", src, err)
		}
	}
	return so, ingest.Options{
		Name: name, Stores: stores, Data: f.data, Parity: f.parity, BlockSize: int(blockSize),
		ShardSize: int64(shardSize), Seed: f.seed, Force: f.force, Logger: log, Format: f.format, GroupShards: f.groupShards,
	}, nil
}

func runIngestPart(ctx context.Context, log *slog.Logger, out io.Writer, stores []backend.Store, f *ingestFlags, src, name string) error {
	part, err := ingest.ParsePart(f.part, os.Getenv)
	if err != nil {
		return err
	}
	var res *ingest.PartResult
	st, opts, err := sliceStream(ctx, f, src, name, stores, log)
	switch {
	case err != nil:
		return err
	case st != nil:
		// WebDataset shards: the part reads its slice of them only.
		defer st.Close()
		defer streamingRuntime(&opts)()
		res, err = ingest.RunSlicePart(ctx, st, opts, part, ingest.JobID(f.job, os.Getenv))
	default:
		var source *ingest.Source
		if source, opts, err = ingestOptions(f, src, name, stores, log); err != nil {
			return err
		}
		res, err = ingest.RunPart(ctx, source, opts, part, ingest.JobID(f.job, os.Getenv))
	}
	if errors.Is(err, ingest.ErrAlreadyCommitted) {
		fmt.Fprintln(out, err)
		return nil
	}
	if err != nil {
		return err
	}
	printPart(out, name, part, res)
	return nil
}

func printPart(out io.Writer, name string, part ingest.Part, res *ingest.PartResult) {
	fmt.Fprintf(out, "part %s of %s done: %d of %d shards, %s of samples, %s stored, %.1f MB/s, %s (ingest %s)\n",
		part, name, res.Shards, res.AllShards, humanize.IBytes(uint64(res.Bytes)), humanize.IBytes(uint64(res.StoredBytes)),
		float64(res.Bytes)/1e6/res.Elapsed.Seconds(), res.Elapsed.Round(1e6), res.IngestID)
	fmt.Fprintf(out, "  when all %d parts are done: shardfs commit %s --stores ...\n", part.Count, name)
}

// streamingRuntime sets the runtime for a stream of records, and returns
// what sets it back. Both settings are process-wide: the command owns
// them, not the ingest package.
//
// Go's collector runs at 75% heap growth, not its default 100%, unless
// GOGC is set. A stream's live heap is flat in the number of records (at
// most 8.1 MB at 1,000,000 and at 5,000,000 WebDataset records at
// --shard-size 512KiB, heap profiles at the largest live heap), but the
// heap goal is twice the most any collection marks, and a long stream
// meets its worst moments often where a short source ends before them.
// 75% took the peak RSS of 1,000,000 records from 43.2 to 41.4 MB
// (medians of 3; 10,000 records: 36.6 and 36.1) for about 8% more CPU;
// 50% from 43.2 to 39.8 for 12-35% more (file:// stores on tmpfs, this
// machine).
//
// No heap profile is sampled, unless $SHARDFS_MEM_PROFILE asks for one
// (withCPUProfile) or GODEBUG sets memprofilerate. The sampler keeps a
// record of each allocation's stack, every 512 KiB allocated, and reads
// the binary's tables to walk it: both grow with the distinct stacks a
// long stream meets, for a profile nobody reads. 5,000,000 WebDataset
// records at --shard-size 512KiB peaked at 39.8 and 40.9 MB without it
// and 40.5 and 41.2 with it, and took 39.9 and 39.3 CPU s, not 43.5 and
// 44.6; 10,000 records peaked where they did (35.5 MB, medians of 3;
// file:// stores on tmpfs).
//
// And the stream runs under a memory ceiling (memceiling.go): opts'
// ChunkDone sets it once the first chunks are written.
func streamingRuntime(opts *ingest.Options) (undo func()) {
	ceiling := startMemoryCeiling(opts.Logger)
	opts.ChunkDone = ceiling.chunkDone
	undo = ceiling.stop
	if os.Getenv("GOGC") == "" {
		old, ceiling := debug.SetGCPercent(75), undo
		undo = func() { ceiling(); debug.SetGCPercent(old) }
	}
	if os.Getenv("SHARDFS_MEM_PROFILE") == "" && !strings.Contains(os.Getenv("GODEBUG"), "memprofilerate") {
		rate, gc := runtime.MemProfileRate, undo
		runtime.MemProfileRate = 0
		undo = func() { gc(); runtime.MemProfileRate = rate }
	}
	return undo
}

// runDryRun reads src and prints what its ingest would write, touching no
// store.
func runDryRun(ctx context.Context, log *slog.Logger, out io.Writer, f *ingestFlags, src, name string) error {
	var d *ingest.DryRun
	var opts ingest.Options
	if f.stream && f.format != 1 {
		// A source of records is read as the ingest would read it: a
		// chunk at a time, in the same memory.
		st, sopts, err := openStream(ctx, f, src, name, nil, log)
		if err != nil {
			return err
		}
		if st != nil {
			defer st.Close()
			if d, err = ingest.PlanStream(ctx, st, sopts); err != nil {
				return err
			}
			opts = sopts
			printSourceNotes(src, st.Warnings, 0, 0)
		}
	}
	if d == nil {
		source, sopts, err := ingestOptions(f, src, name, nil, log)
		if err != nil {
			return err
		}
		if d, err = ingest.Plan(source, sopts); err != nil {
			return err
		}
		opts = sopts
	}
	fmt.Fprintf(out, "dry run of %s: %d samples (%s) in %d strata would be %d shards (%d read windows), %s stored RS(%d,%d); nothing was written\n",
		name, d.Samples, humanize.IBytes(uint64(d.Bytes)), len(d.Strata), d.Shards, d.Windows, humanize.IBytes(uint64(d.StoredBytes)), opts.Data, opts.Parity)
	if d.Chunks > 0 {
		fmt.Fprintf(out, "  read once, in %d chunks of records (--stream)\n", d.Chunks)
	}
	printStrata(out, d.Strata)
	return nil
}

func runIngest(ctx context.Context, log *slog.Logger, out io.Writer, stores []backend.Store, f *ingestFlags, src, name string) (*ingest.Result, error) {
	if f.stream && f.format != 1 {
		st, opts, err := openStream(ctx, f, src, name, stores, log)
		if err != nil {
			return nil, err
		}
		if st != nil {
			defer st.Close()
			bar := newProgress("ingest "+name+" (sample bytes uploaded)", -1) // the total is known at the end
			opts.Progress = bar.Add
			defer streamingRuntime(&opts)()
			res, err := ingest.RunStream(ctx, st, opts)
			bar.Finish()
			if err != nil {
				return nil, err
			}
			printSourceNotes(src, st.Warnings, 0, 0)
			printCommitted(out, name, res, len(stores), true)
			return res, nil
		}
	}
	source, opts, err := ingestOptions(f, src, name, stores, log)
	if err != nil {
		return nil, err
	}
	var total int64
	for _, it := range source.Items {
		total += it.Size
	}
	bar := newProgress("ingest "+name, total)
	opts.Progress = bar.Add
	res, err := ingest.Run(ctx, source, opts)
	bar.Finish()
	if err != nil {
		return nil, err
	}
	printCommitted(out, name, res, len(stores), true)
	return res, nil
}

// sliceStream opens src for a part that reads only its slice: WebDataset
// shards, streamed (--stream, not --format 1); nil for any other source,
// whose parts each scan it whole.
func sliceStream(ctx context.Context, f *ingestFlags, src, name string, stores []backend.Store, log *slog.Logger) (*ingest.Stream, ingest.Options, error) {
	if !f.stream || f.format == 1 {
		return nil, ingest.Options{}, nil
	}
	st, opts, err := openStream(ctx, f, src, name, stores, log)
	if err == nil && st != nil && !st.Sliceable() {
		log.Warn("each part reads the whole corpus: its records are keyed by line number, which a part reading only its slice does not know; give --key FIELD, a field unique to each record, and each part reads only its slice of the corpus", "corpus", src)
	}
	if err != nil || st == nil || !st.Sliceable() {
		if st != nil {
			st.Close()
		}
		return nil, opts, err
	}
	return st, opts, nil
}

// openStream opens src for a streaming ingest (ingest.OpenStream): nil
// for a source that is read whole first.
func openStream(ctx context.Context, f *ingestFlags, src, name string, stores []backend.Store, log *slog.Logger) (*ingest.Stream, ingest.Options, error) {
	so, opts, err := ingestFlagOptions(f, src, name, stores, log)
	if err != nil {
		return nil, opts, err
	}
	var st *ingest.Stream
	if so.Store != nil {
		st, err = ingest.OpenStoreStream(ctx, so)
	} else {
		st, err = ingest.OpenStream(src, so)
	}
	return st, opts, err
}

// runAppend appends SRC to dataset name: erasure and format flags only if
// given (they must match the dataset's), the dataset's derived fields
// reused unless given.
func runAppend(cmd *cobra.Command, log *slog.Logger, stores []backend.Store, f *ingestFlags, src, name string) error {
	fl := cmd.Flags()
	switch {
	case f.force:
		return fmt.Errorf("--append and --force: --append adds to NAME, --force replaces it; choose one")
	case f.job != "" && !fl.Changed("part"):
		return fmt.Errorf("--job names a distributed append: use it with --part I/N")
	}
	ctx := cmd.Context()
	if !fl.Changed("label-fields") && !fl.Changed("time-bucket") && !fl.Changed("bins") && !fl.Changed("label") && !fl.Changed("strata") {
		h, err := repository.LoadHeader(ctx, stores, name, log)
		if err != nil {
			return fmt.Errorf("append to %s: %w", name, err)
		}
		reuseDerived(f, h)
	}
	source, opts, err := ingestOptions(f, src, name, stores, log)
	if err != nil {
		return err
	}
	for flag, zero := range map[string]func(){
		"data": func() { opts.Data = 0 }, "parity": func() { opts.Parity = 0 }, "block-size": func() { opts.BlockSize = 0 },
		"format": func() { opts.Format = 0 }, "seed": func() {}, "shard-size": func() { opts.ShardSize = 0 },
	} {
		if !fl.Changed(flag) {
			zero()
		}
	}
	if fl.Changed("part") {
		part, err := ingest.ParsePart(f.part, os.Getenv)
		if err != nil {
			return err
		}
		res, err := ingest.RunAppendPart(ctx, source, opts, ingest.AppendOptions{SkipExisting: f.skipExisting}, part, ingest.JobID(f.job, os.Getenv))
		if errors.Is(err, ingest.ErrAlreadyCommitted) {
			fmt.Fprintln(cmd.OutOrStdout(), err)
			return nil
		}
		if err != nil {
			return err
		}
		printPart(cmd.OutOrStdout(), name, part, res)
		return nil
	}
	var total int64
	for _, it := range source.Items {
		total += it.Size
	}
	bar := newProgress("append "+name, total)
	opts.Progress = bar.Add
	res, err := ingest.Append(ctx, source, opts, ingest.AppendOptions{SkipExisting: f.skipExisting})
	bar.Finish()
	if errors.Is(err, ingest.ErrNothingToDo) {
		fmt.Fprintln(cmd.OutOrStdout(), err)
		return nil
	}
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	m := res.Manifest
	fmt.Fprintf(out, "committed version %d of %s (after version %d): appended %d samples in %d new shards\n",
		res.Version, name, res.Parent, res.Samples, m.Segments[len(m.Segments)-1].Shards)
	if res.Skipped > 0 {
		fmt.Fprintf(out, "  left out %d samples whose keys %s holds already\n", res.Skipped, name)
	}
	samples, _ := repository.Totals(m)
	fmt.Fprintf(out, "  %s of new samples, %s uploaded (%.2fx), %.1f MB/s, %s; the dataset now holds %d samples in %d strata, %d shards\n",
		humanize.IBytes(uint64(res.Bytes)), humanize.IBytes(uint64(res.StoredBytes)),
		float64(res.StoredBytes)/float64(max(res.Bytes, 1)), float64(res.Bytes)/1e6/res.Elapsed.Seconds(), res.Elapsed.Round(1e6),
		samples, len(m.Strata), len(m.Shards))
	return nil
}

// reuseDerived sets f's time buckets and bins to dataset h's cuts, and its
// label fields to h's others, so that an append's samples are cut as the
// dataset's were (bins at the dataset's edges, not the new data's quantiles).
//
// A dataset of records takes its --label and --strata from h too: an
// append of records is stratified by the dataset's fields unless told.
func reuseDerived(f *ingestFlags, h *manifest.Manifest) {
	if h.HasRecords() {
		f.label, f.strata = "", slices.Clone(h.StrataOnly)
		if c := h.ClassFields(); len(c) == 1 {
			f.label = c[0]
		}
	}
	if len(h.Derived) == 0 {
		return
	}
	derived := map[string]bool{}
	for _, d := range h.Derived {
		derived[d.Field] = true
		if d.Width > 0 {
			f.timeBuckets = append(f.timeBuckets, fmt.Sprintf("%s=%ds", d.Field, d.Width))
			continue
		}
		f.bins = append(f.bins, d.Field+"="+formatEdges(d.Edges))
	}
	if h.HasRecords() {
		return // the label and strata are set above; label fields are a listing's
	}
	f.labelFields = nil
	for _, l := range h.LabelFields {
		if !derived[l] {
			f.labelFields = append(f.labelFields, l)
		}
	}
}

// printCommitted reports a committed ingest; uploaded says whether this
// process uploaded the bytes (an ingest) or only checked them (a commit).
func printCommitted(out io.Writer, name string, res *ingest.Result, stores int, uploaded bool) {
	m := res.Manifest
	fmt.Fprintf(out, "committed %s: %d samples in %d strata, %d shards, RS(%d,%d) over %d stores\n",
		name, res.Samples, len(m.Strata), len(m.Shards), m.Data, m.Parity, stores)
	if uploaded {
		fmt.Fprintf(out, "  %s of samples, %s stored (%.2fx), %.1f MB/s, %s\n",
			humanize.IBytes(uint64(res.Bytes)), humanize.IBytes(uint64(res.StoredBytes)),
			float64(res.StoredBytes)/float64(max(res.Bytes, 1)), float64(res.Bytes)/1e6/res.Elapsed.Seconds(), res.Elapsed.Round(1e6))
	} else {
		fmt.Fprintf(out, "  %s of samples, %s stored (%.2fx); every fragment checked and the manifest committed in %s\n",
			humanize.IBytes(uint64(res.Bytes)), humanize.IBytes(uint64(res.StoredBytes)),
			float64(res.StoredBytes)/float64(max(res.Bytes, 1)), res.Elapsed.Round(1e6))
	}
	if res.Chunks > 0 {
		format := 2
		if m.Root != nil {
			format = 3
		}
		fmt.Fprintf(out, "  read once, in %d chunks of records (--stream); metadata format %d\n", res.Chunks, format)
		for _, f := range res.SampledBins {
			for _, d := range m.Derived {
				if d.Field == f {
					fmt.Fprintf(out, "  --bins %s: edges %s (the first chunk's quantiles; the outer edges are the least and greatest value)\n", f, formatEdges(d.Edges))
				}
			}
		}
	}
	printStrata(out, m.Strata)
	if len(m.Members) > 0 {
		label := "none (batches carry no .cls)"
		if classes, _ := m.Classes(); m.Labelled() {
			label = fmt.Sprintf("%s, %d classes (each record's .cls)", strings.Join(m.ClassFields(), "+"), len(classes))
		}
		fmt.Fprintf(out, "  records of the members %s; label: %s\n", strings.Join(m.Members, ", "), label)
	}
}

// formatEdges writes bin edges as --bins takes them, each as short as it
// reads back exactly.
func formatEdges(edges []float64) string {
	parts := make([]string, len(edges))
	for i, e := range edges {
		parts[i] = strconv.FormatFloat(e, 'g', -1, 64)
	}
	return strings.Join(parts, ",")
}

// printStrata prints the first strata and their counts.
func printStrata(out io.Writer, strata []manifest.Stratum) {
	var parts []string
	for _, st := range strata[:min(len(strata), maxStrataShown)] {
		parts = append(parts, fmt.Sprintf("%s=%d", st.Name, st.Count))
	}
	if more := len(strata) - maxStrataShown; more > 0 {
		parts = append(parts, fmt.Sprintf("(%d more: shardfs plan shows them by field)", more))
	}
	fmt.Fprintf(out, "  strata: %s\n", strings.Join(parts, " "))
}

// maxStrataShown bounds the strata an ingest prints.
const maxStrataShown = 20

// takeBack removes, after a failed ingest or migrate, the buckets it created and the
// directories opening a file:// store created, where they hold nothing:
// a refused ingest leaves the stores as it found them (issue 59). What
// holds an object stays (backend.RemoveIfEmpty); gc removes an ingest's
// leftovers. It runs on a context of its own: the command's may be the
// one an interrupt cancelled.
func takeBack(out io.Writer, stores []backend.Store, created []bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// One at a time, the last store first: stores that share a new parent
	// directory made it when the first of them was opened.
	for i := len(stores) - 1; i >= 0; i-- {
		if removed, err := backend.RemoveIfEmpty(ctx, stores[i], created[i]); removed && err == nil {
			fmt.Fprintf(out, "removed the empty bucket or directory of store %d, %s, which this command made\n", i, stores[i])
		}
	}
}

// createBuckets makes the bucket of every S3 store that lacks one, all at
// once, and says which it made (in created).
func createBuckets(ctx context.Context, out io.Writer, stores []backend.Store, created []bool) error {
	errs := backend.OnEvery(stores, func(i int, s backend.Store) error {
		var err error
		created[i], err = backend.EnsureBucket(ctx, s)
		return err
	})
	for i, c := range created {
		if c {
			fmt.Fprintf(out, "created the bucket of store %d, %s\n", i, stores[i])
		}
	}
	if _, failed := backend.Split(errs); len(failed) == 0 {
		return nil
	}
	names := make([]string, len(stores))
	for i, s := range stores {
		names[i] = fmt.Sprintf("store %d (%s)", i, s)
	}
	return errors.New(strings.Join(backend.Causes(names, errs), "\n"))
}

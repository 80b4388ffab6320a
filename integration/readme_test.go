package integration

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardfs/shardfs/internal/miniotest"
	"github.com/shardfs/shardfs/internal/synth"
)

// readmeStep is one "$ " line of a README console block: the command, the
// output lines shown under it, and the exit status it is said to have.
type readmeStep struct {
	page   string // README.md, or docs/NAME.md
	line   int
	cmd    string
	output []string
	exit   int
}

var exitComment = regexp.MustCompile(`#\s*exit (\d+)\s*$`)

// docPages are the pages whose console blocks the tests run: the README
// and one page per task in docs/.
func docPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"../README.md"}, pages...)
}

// docSection is the text of the page (the README or a page in docs/) that
// holds the section titled section, and that page's name.
func docSection(t *testing.T, section string) (text, page string) {
	t.Helper()
	for _, p := range docPages(t) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(strings.Split(string(b), "\n"), "## "+section) {
			return string(b), p
		}
	}
	t.Fatalf("no page of the README or docs/ has a section %q", section)
	return "", ""
}

// readmeSteps extracts the console blocks of the section titled section
// of a page (the README or a page in docs/), in order.
func readmeSteps(t *testing.T, page, readme, section string) []readmeStep {
	t.Helper()
	var steps []readmeStep
	in, block := false, false
	sc := bufio.NewScanner(strings.NewReader(readme))
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "## "):
			in = l == "## "+section
		case !in:
		case l == "```console":
			block = true
		case block && l == "```":
			block = false
		case block && strings.HasPrefix(l, "$ "):
			st := readmeStep{page: strings.TrimPrefix(page, "../"), line: n, cmd: strings.TrimPrefix(l, "$ ")}
			if m := exitComment.FindStringSubmatch(l); m != nil {
				st.exit, _ = strconv.Atoi(m[1])
			}
			steps = append(steps, st)
		case block && len(steps) > 0:
			steps[len(steps)-1].output = append(steps[len(steps)-1].output, l)
		}
	}
	if len(steps) == 0 {
		t.Fatalf("the docs have no console blocks under %q", section)
	}
	return steps
}

// normalize makes a line comparable "modulo numbers": a duration as Go
// prints it (158ms, 1.178s, 2m3s) becomes "#t", whatever its unit (an
// ingest the README shows at 158ms took 1.178s on a busy machine); every
// other run of digits, with the hex letters and decimal points around it
// (ids, sizes, pids), becomes '#'; runs of spaces become one space.
var (
	durationish = regexp.MustCompile(`\b[0-9][0-9.]*(h|m|s|ms|µs|us|ns)([0-9][0-9.]*(m|s|ms|µs|us|ns))*\b`)
	numberish   = regexp.MustCompile(`[0-9a-f.]*[0-9][0-9a-f.]*`)
)

func normalize(l string) string {
	l = durationish.ReplaceAllString(l, "#t")
	return strings.Join(strings.Fields(numberish.ReplaceAllString(l, "#")), " ")
}

// TestREADMEWorkflow runs the README's "From zero to a training loop"
// workflow as written, every "$" line in order in one environment: it
// installs what it needs (scripts/deps.sh, which finds it all there after
// the README's test command), starts the six MinIO stores with
// scripts/stores.sh and makes ./pets with examples/make_pets.py, as a
// newcomer would. Only the machine-specific parts are replaced: the
// stores' ports (free ones, in case 9100.. are taken), ./pets, /mnt/pets,
// /tmp/pets-stores and /tmp/pets.ckpt, in the commands and in the output.
// Each command must exit as the README says, and print each line shown
// under it, in order (other lines may come between), numbers aside.
func TestREADMEWorkflow(t *testing.T) {
	t.Parallel() // waits more than it computes, asserts bytes, states and hang bounds (main_test.go, parallelTests)
	requireTorch(t)
	requireTool(t, "torchrun")
	requireTool(t, "fusermount3")
	miniotest.RequireBinary(t)
	readme, page := docSection(t, "From zero to a training loop")
	steps := readmeSteps(t, page, readme, "From zero to a training loop")
	repo, _ := filepath.Abs("..")
	work := t.TempDir()
	src := filepath.Join(work, "pets")
	mnt := filepath.Join(work, "mnt", "pets")
	stores := filepath.Join(work, "pets-stores")
	gobin := filepath.Join(work, "gobin")
	base := freePortRun(t, 6, 100)
	replace := []string{"./pets", src, "/mnt/pets", mnt, "/tmp/pets.ckpt", filepath.Join(work, "pets.ckpt"), "/tmp/pets-stores", stores,
		"127.0.0.1:9100..9105", fmt.Sprintf("127.0.0.1:%d..%d", base, base+5)}
	for i := 0; i < 6; i++ {
		replace = append(replace, fmt.Sprintf("127.0.0.1:910%d", i), fmt.Sprintf("127.0.0.1:%d", base+i))
	}
	sub := strings.NewReplacer(replace...)
	t.Cleanup(func() {
		if isMounted(mnt) {
			exec.Command("umount", mnt).Run()
			if isMounted(mnt) {
				exec.Command("fusermount3", "-uz", mnt).Run()
			}
		}
		// The stores the workflow started, by the pids it wrote, if a step failed before it stopped them.
		if _, err := os.Stat(filepath.Join(stores, "pids")); err == nil {
			exec.Command(filepath.Join(repo, "scripts", "stores.sh"), "stop", stores).Run()
		}
	})
	env := append(os.Environ(), "GOBIN="+gobin, "PATH="+gobin+":"+os.Getenv("PATH"), "PYTHONUNBUFFERED=1")
	runReadmeSteps(t, steps, sub, env, repo)
	if isMounted(mnt) {
		t.Fatal("the README's workflow ends with umount, but the mount is still up")
	}
	if _, err := os.Stat(filepath.Join(stores, "pids")); err == nil {
		t.Fatal("the README's workflow ends by stopping the stores, but their pids file is still there")
	}
}

// freePortRun finds n consecutive free loopback ports whose ports +gap are
// free too (MinIO's consoles), and returns the first.
func freePortRun(t *testing.T, n, gap int) int {
	t.Helper()
	for base := 21000 + os.Getpid()%5000; base < 60000; base += n + 7 {
		ok := true
		for p := base; p < base+n && ok; p++ {
			for _, q := range []int{p, p + gap} {
				l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", q))
				if err != nil {
					ok = false
					break
				}
				l.Close()
			}
		}
		if ok {
			return base
		}
	}
	t.Fatal("no run of free ports")
	return 0
}

// runReadmeSteps runs README steps in order in one environment: "export"
// lines set env, every other line runs in bash in dir, must exit as the
// README says and print each line shown under it, in order (other lines
// may come between), numbers aside. With -v it logs what each printed.
func runReadmeSteps(t *testing.T, steps []readmeStep, sub *strings.Replacer, env []string, dir string) {
	t.Helper()
	for _, st := range steps {
		cmdline := sub.Replace(st.cmd)
		if rest, ok := strings.CutPrefix(cmdline, "export "); ok {
			for _, kv := range strings.Fields(rest) {
				if k, v, ok := strings.Cut(kv, "="); ok {
					env = append(env, k+"="+v)
				}
			}
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
		cmd := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", cmdline)
		cmd.Dir, cmd.Env = dir, env
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		runErr := cmd.Run()
		cancel()
		code := 0
		if ee, ok := runErr.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if runErr != nil {
			t.Fatalf("%s line %d: %s: %v", st.page, st.line, st.cmd, runErr)
		}
		if code != st.exit {
			t.Fatalf("%s line %d: %s\nexit %d, the page says %d\nstdout:\n%s\nstderr:\n%s", st.page, st.line, st.cmd, code, st.exit, out.String(), errb.String())
		}
		got := strings.Split(out.String(), "\n")
		i := 0
		for _, want := range st.output {
			w := normalize(sub.Replace(want))
			for i < len(got) && normalize(got[i]) != w {
				i++
			}
			if i == len(got) {
				t.Fatalf("%s line %d: %s\nthe page shows\n  %s\nwhich the output lacks (in order, numbers aside):\n%s\nstderr:\n%s", st.page, st.line, st.cmd, want, out.String(), errb.String())
			}
			i++
		}
		t.Logf("%s line %d: %s: exit %d, %d lines checked", st.page, st.line, st.cmd, code, len(st.output))
		if testing.Verbose() {
			t.Logf("stdout:\n%s", out.String())
		}
	}
}

// TestREADMETimeStrata runs docs/order.md's "Strata beyond labels" section as
// written on file:// stores, with the test's 600-sample listing in ./logs.
func TestREADMETimeStrata(t *testing.T) {
	work := t.TempDir()
	listing, _, _ := timeListing(t, 600)
	mnt := filepath.Join(work, "mnt", "logs")
	runReadmeSection(t, "Strata beyond labels: time buckets, ranges, recency", work, mnt,
		"./logs", filepath.Dir(listing), "/mnt/logs", mnt, "/tmp/logs-", filepath.Join(work, "logs-"))
}

// runReadmeSection runs the README section's steps as written in work,
// with the binary under test on PATH and the replacements made, and checks
// that they leave the mount at mnt unmounted.
func runReadmeSection(t *testing.T, section, work, mnt string, replace ...string) {
	t.Helper()
	requireTool(t, "fusermount3")
	readme, page := docSection(t, section)
	steps := readmeSteps(t, page, readme, section)
	t.Cleanup(func() {
		if isMounted(mnt) {
			exec.Command("umount", mnt).Run()
		}
	})
	env := append(os.Environ(), "PATH="+filepath.Dir(binary)+":"+os.Getenv("PATH"))
	runReadmeSteps(t, steps, strings.NewReplacer(replace...), env, work)
	if isMounted(mnt) {
		t.Fatal("the README's steps end with umount, but the mount is still up")
	}
}

// TestREADMEVersions runs docs/versions.md's "Datasets that change" section as
// written on file:// stores, with two synthetic trees as ./week-47 and
// ./week-48.
func TestREADMEVersions(t *testing.T) {
	requireTool(t, "fusermount3")
	readme, page := docSection(t, "Datasets that change: append, versions, rollback, gc, migrate")
	steps := readmeSteps(t, page, readme, "Datasets that change: append, versions, rollback, gc, migrate")
	work := t.TempDir()
	week47 := writeSource(t, synth.Imbalanced(300, 3, 0.6, 20_000, 60_000, 47))
	spec := synth.Imbalanced(120, 4, 0.6, 20_000, 60_000, 48)
	spec.Tag = "w48-"
	week48 := writeSource(t, spec)
	mnt := filepath.Join(work, "mnt", "train-v1")
	sub := strings.NewReplacer("./week-47", week47, "./week-48", week48, "/mnt/train-v1", mnt, "/tmp/lives/", filepath.Join(work, "lives")+"/")
	t.Cleanup(func() {
		if isMounted(mnt) {
			exec.Command("umount", mnt).Run()
		}
	})
	env := append(os.Environ(), "PATH="+filepath.Dir(binary)+":"+os.Getenv("PATH"))
	runReadmeSteps(t, steps, sub, env, work)
	if isMounted(mnt) {
		t.Fatal("the README's steps unmount, but the mount is still up")
	}
}

// TestREADMERecords runs docs/records.md's "Records" section as written on
// file:// stores: it makes its WebDataset shards with
// examples/make_webdataset.py, ingests, mounts, reads a batch, samples/
// and the loader, and unmounts.
func TestREADMERecords(t *testing.T) {
	requireVision(t)
	repo, _ := filepath.Abs("..")
	work := t.TempDir()
	mnt := filepath.Join(work, "mnt", "pairs")
	runReadmeSection(t, "Records: WebDataset shards, JSONL and Parquet", work, mnt,
		"/mnt/pairs", mnt, "/tmp/pairs-", filepath.Join(work, "pairs-"),
		"examples/", filepath.Join(repo, "examples")+"/", "PYTHONPATH=python", "PYTHONPATH="+filepath.Join(repo, "python"))
}

// sectionsRun are the sections whose console blocks a test runs as
// written: TestREADMEWorkflow, TestREADMEVersions, and runReadmeSection's
// callers.
var sectionsRun = []string{
	"From zero to a training loop",
	"Datasets that change: append, versions, rollback, gc, migrate",
	"Strata beyond labels: time buckets, ranges, recency",
	"Records: WebDataset shards, JSONL and Parquet",
}

// Every console block of the README and of docs/ is run by a test: a block
// added to a section no test runs fails here, naming its page and line.
func TestEveryConsoleBlockIsRun(t *testing.T) {
	for _, p := range docPages(t) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		section := ""
		for n, l := range strings.Split(string(b), "\n") {
			if s, ok := strings.CutPrefix(l, "## "); ok {
				section = s
			}
			if l == "```console" && !slices.Contains(sectionsRun, section) {
				t.Errorf("%s line %d: a console block in section %q, which no test runs: run it (runReadmeSection), or show it as ```sh", strings.TrimPrefix(p, "../"), n+1, section)
			}
		}
	}
	for _, s := range sectionsRun {
		docSection(t, s) // each still exists
	}
}

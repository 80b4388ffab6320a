package integration

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/internal/miniotest"
	"github.com/shardfs/shardfs/manifest"
	"github.com/shardfs/shardfs/repository"
)

// jobsOf decodes the Jobs of a manifest file, strictly, by name.
func jobsOf(t *testing.T, path string) map[string]*batchv1.Job {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	jobs := map[string]*batchv1.Job{}
	for _, doc := range bytes.Split(b, []byte("\n---")) {
		var job batchv1.Job
		if err := yaml.UnmarshalStrict(doc, &job); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		jobs[job.Name] = &job
	}
	return jobs
}

// jobEnv is a container's environment as Kubernetes would set it for pod
// index (Indexed Jobs), the fields a pod reads from itself given: the
// Job's uid; SHARDFS_STORES is the test's stores.
func jobEnv(t *testing.T, c corev1.Container, index, uid, stores string) []string {
	t.Helper()
	env := []string{"JOB_COMPLETION_INDEX=" + index, "AWS_ACCESS_KEY_ID=" + miniotest.AccessKey, "AWS_SECRET_ACCESS_KEY=" + miniotest.SecretKey}
	for _, e := range c.Env {
		switch {
		case e.Name == "SHARDFS_STORES":
			env = append(env, e.Name+"="+stores)
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && strings.Contains(e.ValueFrom.FieldRef.FieldPath, "controller-uid"):
			env = append(env, e.Name+"="+uid)
		case e.ValueFrom != nil:
			t.Fatalf("container %s: env %s comes from %+v, which the test cannot give", c.Name, e.Name, e.ValueFrom)
		default:
			env = append(env, e.Name+"="+e.Value)
		}
	}
	return env
}

// Issue 59: the Kubernetes example that ingests a large sharded corpus
// with parts (examples/k8s/ingest-records-job.yaml), run as far as a test
// can without a cluster. Each pod of the Indexed Job is a process with the
// container's args and env, the pod's index in JOB_COMPLETION_INDEX; the
// source (WebDataset shards on a store) and the stores are MinIO's, and
// --shard-size is 256KiB so that 8 parts have shards to share. All 8 run
// at once; one is killed with SIGKILL and run again, as the Job retries a
// pod. Then the commit Job's container commits, and the dataset serves
// every record, member by member, byte for byte.
func TestKubernetesRecordsJobOnMinIO(t *testing.T) {
	jobs := jobsOf(t, "../examples/k8s/ingest-records-job.yaml")
	ingestJob, commitJob := jobs["shardfs-ingest-corpus"], jobs["shardfs-commit-corpus"]
	if ingestJob == nil || commitJob == nil || ingestJob.Spec.Completions == nil {
		t.Fatalf("the manifest's Jobs: %v", jobs)
	}
	parts := int(*ingestJob.Spec.Completions)
	if parts != 8 || *ingestJob.Spec.CompletionMode != batchv1.IndexedCompletion {
		t.Fatalf("want an Indexed Job of 8 completions: %d", parts)
	}
	c := sharedCluster(t, 3)
	storeURLs := strings.Join(c.urls, ",")
	srcSrv := miniotest.Start(t, "corpus")
	dir := t.TempDir()
	writeRecordShards(t, dir, 16, 150)
	w := readWDS(t, dir)
	src, err := backend.Open(srcSrv.URL("corpus/shards"), backend.OpenOptions{Credentials: &backend.Credentials{AccessKeyID: miniotest.AccessKey, SecretAccessKey: miniotest.SecretKey}})
	if err != nil {
		t.Fatal(err)
	}
	tars, _ := filepath.Glob(filepath.Join(dir, "*.tar"))
	for _, p := range tars {
		if err := src.Put(context.Background(), filepath.Base(p), mustRead(t, p)); err != nil {
			t.Fatal(err)
		}
	}
	// The container's args, with the test's source, name and shard size.
	part := ingestJob.Spec.Template.Spec.Containers[0]
	var args []string
	for _, a := range part.Args {
		switch {
		case strings.HasPrefix(a, "http://minio-src"):
			a = srcSrv.URL("corpus/shards")
		case strings.HasPrefix(a, "--shard-size="):
			a = "--shard-size=256KiB"
		case strings.HasPrefix(a, "--data="):
			a = "--data=2"
		case strings.HasPrefix(a, "--parity="):
			a = "--parity=1"
		}
		args = append(args, a)
	}
	name := args[len(args)-1]
	start := func(index string) (*chan error, func()) {
		cmd := execBinary(binary, args...)
		cmd.Env = append(os.Environ(), jobEnv(t, part, index, "job-uid-59", storeURLs)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			err := cmd.Wait()
			if err != nil {
				err = &partError{index, err, out.String()}
			}
			done <- err
		}()
		return &done, func() { cmd.Process.Signal(syscall.SIGKILL) }
	}
	var running []*chan error
	var kill func()
	for i := range parts {
		done, k := start(string(rune('0' + i)))
		running = append(running, done)
		if i == 3 {
			kill = k
		}
	}
	time.Sleep(100 * time.Millisecond)
	kill()
	for i, done := range running {
		select {
		case err := <-*done:
			if err != nil && i != 3 {
				t.Fatal(err)
			}
		case <-time.After(3 * time.Minute):
			t.Fatalf("part %d did not end within 3 minutes", i)
		}
	}
	// The Job retries the killed pod: it redoes its part.
	done, _ := start("3")
	if err := <-*done; err != nil {
		t.Fatal(err)
	}
	commit := commitJob.Spec.Template.Spec.Containers[0]
	cmd := execBinary(binary, commit.Args...)
	cmd.Env = append(os.Environ(), jobEnv(t, commit, "0", "job-uid-59", storeURLs)...)
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "committed "+name) {
		t.Fatalf("commit: %v\n%s", err, out)
	}
	ds, err := repository.Open(context.Background(), c.clients(t), name, repository.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := ds.Manifest
	if m.Samples.Len() != w.records || len(m.Shards) < parts {
		t.Fatalf("%s holds %d records in %d shards; the source has %d, and 8 parts want 8 shards or more", name, m.Samples.Len(), len(m.Shards), w.records)
	}
	for i := 0; i < m.Samples.Len(); i++ {
		got, err := ds.ReadSample(context.Background(), i)
		if err != nil {
			t.Fatal(err)
		}
		key := m.Samples.Key(i)
		var members []string
		manifest.RecordMembers(m.Samples.Record(i), func(member int, size int64) {
			members = append(members, m.Members[member])
			if want := w.bytes[key+"."+m.Members[member]]; int64(len(got)) < size || !bytes.Equal(got[:size], want) {
				t.Fatalf("record %s: member %s differs from the source's", key, m.Members[member])
			}
			got = got[size:]
		})
		if strings.Join(members, ",") != strings.Join(w.order[key], ",") || len(got) != 0 {
			t.Fatalf("record %s: members %v, the source's %v", key, members, w.order[key])
		}
	}
}

// partError is a part's failure, with what it printed.
type partError struct {
	index string
	err   error
	out   string
}

func (e *partError) Error() string { return "part " + e.index + ": " + e.err.Error() + "\n" + e.out }

// Package miniotest starts real MinIO server processes on 127.0.0.1 for
// tests, one process per store so a test can kill, stop or restart one.
//
// When the minio binary is missing the test is skipped, except under CI=true,
// where a missing tool is a failure.
package miniotest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/internal/gobin"
)

// Root credentials of every test server. They are test-only values.
const (
	AccessKey = "shardfs-test-access"
	SecretKey = "shardfs-test-secret-0123456789"
)

// Server is one running MinIO process.
type Server struct {
	Addr    string // host:port
	DataDir string
	bin     string
	cmd     *exec.Cmd
	t       testing.TB
}

// Binary finds the minio binary: $MINIO_BIN, PATH, then the Go bin directory.
func Binary() (string, error) {
	if b := os.Getenv("MINIO_BIN"); b != "" {
		return b, nil
	}
	if b, err := exec.LookPath("minio"); err == nil {
		return b, nil
	}
	b := filepath.Join(gobin.Dir(), "minio")
	if _, err := os.Stat(b); err == nil {
		return b, nil
	}
	return "", fmt.Errorf("minio binary not found: run go install github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c or set MINIO_BIN")
}

// RequireBinary returns the minio binary, skipping the test when it is
// missing, or failing it under CI=true.
func RequireBinary(t testing.TB) string {
	t.Helper()
	b, err := Binary()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true: %v", err)
		}
		t.Skip(err)
	}
	return b
}

// Start launches a MinIO server with a fresh data directory and creates the
// named buckets in it. The process is killed in t.Cleanup.
func Start(t testing.TB, buckets ...string) *Server {
	t.Helper()
	s := &Server{bin: RequireBinary(t), DataDir: filepath.Join(t.TempDir(), "data"), t: t}
	for _, b := range buckets {
		// MinIO's single-drive mode serves each top-level directory as a bucket.
		if err := os.MkdirAll(filepath.Join(s.DataDir, b), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s.Addr = freeAddr(t)
	s.Restart()
	t.Cleanup(s.Kill)
	return s
}

// StartShared launches a MinIO server with its data in dir, for the tests
// of a package to share: it belongs to no one test, and the caller ends it
// (Kill). Its buckets are the caller's to create. It cannot be restarted.
func StartShared(dir string) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, DataDir: filepath.Join(dir, "data")}
	if err := os.MkdirAll(s.DataDir, 0o755); err != nil {
		return nil, err
	}
	if s.Addr, err = freeAddrErr(); err != nil {
		return nil, err
	}
	return s, s.start()
}

// Restart starts the process again on the same address and data directory,
// killing the running one first, if any.
func (s *Server) Restart() {
	s.t.Helper()
	if err := s.start(); err != nil {
		s.t.Fatal(err)
	}
}

// start is Restart, returning its failure.
func (s *Server) start() error {
	s.Kill()
	console, err := freeAddrErr()
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin, "server", "--quiet", "--address", s.Addr, "--console-address", console, s.DataDir)
	cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+AccessKey, "MINIO_ROOT_PASSWORD="+SecretKey,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off", "MINIO_CI_CD=1")
	// MinIO logs go to a file: on stderr they would drown the test output.
	logf, err := os.OpenFile(s.DataDir+".log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start minio: %v", err)
	}
	s.cmd = cmd
	// /minio/health/ready answers 200 before the object layer is up, so
	// wait until a real S3 request is answered.
	probe, err := backend.Open("http://"+s.Addr+"/shardfs-probe", backend.OpenOptions{
		Credentials: &backend.Credentials{AccessKeyID: AccessKey, SecretAccessKey: SecretKey}})
	if err != nil {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := backend.Ping(ctx, probe)
		cancel()
		if err == nil || errors.Is(err, backend.ErrNoBucket) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.Kill()
	return fmt.Errorf("minio on %s did not become ready in 60s", s.Addr)
}

// Pid is the MinIO process's (0 when it is not running), for its CPU time.
func (s *Server) Pid() int {
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Kill stops the process with SIGKILL and waits for it. It is idempotent.
func (s *Server) Kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGCONT) // a stopped process must run to die promptly
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.cmd = nil
}

// Signal sends sig (SIGSTOP, SIGCONT) to the process.
func (s *Server) Signal(sig syscall.Signal) error {
	if s.cmd == nil {
		return fmt.Errorf("minio on %s is not running", s.Addr)
	}
	return s.cmd.Process.Signal(sig)
}

// URL is the store URL of bucket (and optional prefix) on this server.
func (s *Server) URL(bucketAndPrefix string) string {
	return "http://" + s.Addr + "/" + bucketAndPrefix
}

func freeAddr(t testing.TB) string {
	t.Helper()
	addr, err := freeAddrErr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

func freeAddrErr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

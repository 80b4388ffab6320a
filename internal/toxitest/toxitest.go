// Package toxitest runs a real toxiproxy server for tests, so a store can be
// slowed down, black-holed or cut off at the TCP level while MinIO itself
// stays healthy. Only tests import it.
//
// When the toxiproxy binary is missing the test is skipped, except under
// CI=true, where a missing tool is a failure.
package toxitest

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"

	"github.com/shardfs/shardfs/internal/gobin"
)

// Server is one running toxiproxy process.
type Server struct {
	Client *toxiproxy.Client
	cmd    *exec.Cmd
	t      testing.TB
}

// Binary finds toxiproxy's server: $TOXIPROXY_BIN, toxiproxy-server on PATH,
// then the Go bin directory, where `go install .../cmd/server@v2.5.0` names it "server".
func Binary() (string, error) {
	if b := os.Getenv("TOXIPROXY_BIN"); b != "" {
		return b, nil
	}
	if b, err := exec.LookPath("toxiproxy-server"); err == nil {
		return b, nil
	}
	for _, name := range []string{"toxiproxy-server", "server"} {
		b := filepath.Join(gobin.Dir(), name)
		if out, err := exec.Command(b, "-version").CombinedOutput(); err == nil && strings.Contains(string(out), "toxiproxy") {
			return b, nil
		}
	}
	return "", os.ErrNotExist
}

// Start launches toxiproxy on a free loopback port; it is killed in t.Cleanup.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		msg := "toxiproxy server not found: go install github.com/Shopify/toxiproxy/v2/cmd/server@v2.5.0, or set TOXIPROXY_BIN"
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true: " + msg)
		}
		t.Skip(msg)
	}
	addr := FreeAddr(t)
	host, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(bin, "-host", host, "-port", port)
	logf, err := os.Create(filepath.Join(t.TempDir(), "toxiproxy.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start toxiproxy: %v", err)
	}
	s := &Server{Client: toxiproxy.NewClient("http://" + addr), cmd: cmd, t: t}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		logf.Close()
	})
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get("http://" + addr + "/version"); err == nil {
			resp.Body.Close()
			return s
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("toxiproxy on %s did not answer in 20s", addr)
	return nil
}

// Proxy forwards a fresh loopback address to upstream (host:port) and
// returns the proxy; its Listen field is the address to connect to.
// Pid is the toxiproxy process's, for its CPU time.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

func (s *Server) Proxy(name, upstream string) *toxiproxy.Proxy {
	s.t.Helper()
	for tries := 1; ; tries++ {
		// FreeAddr's port is free when it looks, not when toxiproxy binds
		// it: another process of the suite can take it in between (a CI
		// run: "bind: address already in use"). Another port then serves.
		p, err := s.Client.CreateProxy(name, FreeAddr(s.t), upstream)
		if err == nil {
			return p
		}
		if tries == 5 || !strings.Contains(err.Error(), "address already in use") {
			s.t.Fatalf("toxiproxy: create %s: %v", name, err)
		}
	}
}

// Latency adds ms ± jitter ms to every response through p (the downstream direction).
func Latency(t testing.TB, p *toxiproxy.Proxy, ms, jitter int) {
	t.Helper()
	if _, err := p.AddToxic("latency", "latency", "downstream", 1, toxiproxy.Attributes{"latency": ms, "jitter": jitter}); err != nil {
		t.Fatalf("toxiproxy: latency on %s: %v", p.Name, err)
	}
}

// BlackHole makes p accept connections and data and never answer, as a
// hung server or a dropped route does (the timeout toxic with timeout 0).
func BlackHole(t testing.TB, p *toxiproxy.Proxy) {
	t.Helper()
	if _, err := p.AddToxic("blackhole", "timeout", "upstream", 1, toxiproxy.Attributes{"timeout": 0}); err != nil {
		t.Fatalf("toxiproxy: black-hole %s: %v", p.Name, err)
	}
}

// Heal removes every toxic from p.
func Heal(t testing.TB, p *toxiproxy.Proxy) {
	t.Helper()
	toxics, err := p.Toxics()
	if err != nil {
		t.Fatalf("toxiproxy: list toxics of %s: %v", p.Name, err)
	}
	for _, tx := range toxics {
		if err := p.RemoveToxic(tx.Name); err != nil && !removedLate(p, tx.Name) {
			t.Fatalf("toxiproxy: remove %s from %s: %v", tx.Name, p.Name, err)
		}
	}
}

// removedLate waits up to a minute for a toxic whose removal timed out to
// go. toxiproxy's API answers 503 after 25 s while a removal still waits
// for its proxy's lock (Shopify/toxiproxy#558, open), and the removal goes
// on in the background; it is retried every few seconds meanwhile.
func removedLate(p *toxiproxy.Proxy, name string) bool {
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(2 * time.Second) {
		toxics, err := p.Toxics()
		if err != nil {
			continue
		}
		if !slices.ContainsFunc(toxics, func(tx toxiproxy.Toxic) bool { return tx.Name == name }) {
			return true
		}
		p.RemoveToxic(name)
	}
	return false
}

// FreeAddr returns a free 127.0.0.1 address.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Bandwidth limits every response through p to kbps KB/s: the store
// answers at once, then its bytes trickle.
func Bandwidth(t testing.TB, p *toxiproxy.Proxy, kbps int) {
	t.Helper()
	if _, err := p.AddToxic("bandwidth", "bandwidth", "downstream", 1, toxiproxy.Attributes{"rate": kbps}); err != nil {
		t.Fatalf("toxiproxy: bandwidth on %s: %v", p.Name, err)
	}
}

package csinode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	mountutils "k8s.io/mount-utils"
)

// Config is what the plugin needs from the command line.
type Config struct {
	// DriverName is the CSI driver's name, as in the CSIDriver object.
	DriverName string
	Version    string
	NodeID     string
	// StateDir holds the views: a directory on the host that survives the
	// plugin, with bidirectional mount propagation in a pod.
	StateDir string
	// MountCommand starts a mount daemon: the program and the arguments
	// before the view's own, such as ["/usr/bin/shardfs", "mount"].
	MountCommand []string
	// Args turns a volume's attributes into the daemon's arguments (its
	// flags and the dataset name; not the mount point), checking each.
	// Its errors are worded in attribute names; they become
	// INVALID_ARGUMENT.
	Args func(attrs map[string]string) ([]string, error)
	// Reword turns a daemon's error message into attribute terms (a flag
	// "--batch-size" is the attribute "batch-size"); nil leaves it.
	Reword func(string) string
	// StartTimeout bounds a daemon's start (default 2 minutes, the
	// kubelet's own deadline for a publish).
	StartTimeout time.Duration
	Logger       *slog.Logger
}

// SecretKeys are the keys a volume's secrets may hold: the credentials
// for its stores, as in the shardfs config file.
var SecretKeys = []string{"access_key_id", "secret_access_key", "session_token"}

// Driver is the node plugin.
type Driver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedNodeServer

	cfg     Config
	log     *slog.Logger
	mounter mountutils.Interface
	done    chan struct{} // closed when Run returns: watches stop

	mu      sync.Mutex       // never held while waiting for a view's (see dropIfIdle)
	views   map[string]*view // by key
	targets map[string]*view // by target path
}

// New makes a plugin and recovers the views a previous run left in
// StateDir: see recover.go.
func New(cfg Config) (*Driver, error) {
	if cfg.DriverName == "" || cfg.NodeID == "" || cfg.StateDir == "" || len(cfg.MountCommand) == 0 || cfg.Args == nil {
		return nil, errors.New("csinode: DriverName, NodeID, StateDir, MountCommand and Args are required")
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 2 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Reword == nil {
		cfg.Reword = func(s string) string { return s }
	}
	if err := os.MkdirAll(filepath.Join(cfg.StateDir, "views"), 0o700); err != nil {
		return nil, fmt.Errorf("--state-dir %s: %w", cfg.StateDir, err)
	}
	// Without systemd: its only use in mount-utils is to run a mount
	// helper in a scope of its own, and a bind mount has none (its lazy
	// detection is also unsafe for concurrent mounts).
	d := &Driver{cfg: cfg, log: cfg.Logger, mounter: mountutils.NewWithoutSystemd(""), done: make(chan struct{}),
		views: map[string]*view{}, targets: map[string]*view{}}
	d.recoverViews()
	return d, nil
}

// Run serves the Identity and Node services on endpoint (unix:///path, or
// a path) until ctx ends. Daemons keep serving after it returns: a plugin
// that is restarted adopts them.
func (d *Driver) Run(ctx context.Context, endpoint string) error {
	defer close(d.done)
	path := endpoint
	if u, err := url.Parse(endpoint); err == nil && u.Scheme == "unix" {
		path = u.Path
	} else if strings.Contains(endpoint, "://") {
		return fmt.Errorf("--endpoint %s: use unix:///path/csi.sock", endpoint)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove the old socket %s: %w", path, err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("--endpoint %s: %w", endpoint, err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(d.logCalls))
	csi.RegisterIdentityServer(srv, d)
	csi.RegisterNodeServer(srv, d)
	go func() {
		<-ctx.Done()
		stopped := make(chan struct{})
		go func() { srv.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(10 * time.Second):
			srv.Stop()
		}
	}()
	d.mu.Lock()
	views := len(d.views)
	d.mu.Unlock()
	d.log.Info("serving CSI", "driver", d.cfg.DriverName, "node", d.cfg.NodeID, "endpoint", path, "views", views)
	if err := srv.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// logCalls logs each call's method and outcome; never its request, which
// may carry secrets.
func (d *Driver) logCalls(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := h(ctx, req)
	if err != nil {
		d.log.Warn("csi call failed", "method", info.FullMethod, "code", status.Code(err).String(), "err", status.Convert(err).Message(), "took", time.Since(start).Round(time.Millisecond))
	} else if !strings.HasSuffix(info.FullMethod, "Probe") && !strings.Contains(info.FullMethod, "GetCapabilities") {
		d.log.Debug("csi call", "method", info.FullMethod, "took", time.Since(start).Round(time.Millisecond))
	}
	return resp, err
}

// GetPluginInfo names the driver.
func (d *Driver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: d.cfg.DriverName, VendorVersion: d.cfg.Version}, nil
}

// GetPluginCapabilities declares none: a node-only plugin has no
// controller service, and its volumes are reachable from every node.
func (d *Driver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{}, nil
}

// Probe: the plugin is ready once it serves (its views were recovered
// before).
func (d *Driver) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{}, nil
}

// NodeGetInfo names the node.
func (d *Driver) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: d.cfg.NodeID}, nil
}

// NodeGetCapabilities: volume stats (the cache and disk tier's use) and
// volume health (a daemon that cannot be restarted, stores down). No staging: a
// view's daemon is shared across volumes and pods by the plugin itself.
func (d *Driver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	rpc := func(t csi.NodeServiceCapability_RPC_Type) *csi.NodeServiceCapability {
		return &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: t}}}
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: []*csi.NodeServiceCapability{
		rpc(csi.NodeServiceCapability_RPC_GET_VOLUME_STATS), rpc(csi.NodeServiceCapability_RPC_GET_VOLUME_HEALTH)}}, nil
}

// NodePublishVolume serves the view of the volume's attributes and secrets
// at the target path, read-only, and returns once it is served.
func (d *Driver) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	case req.GetTargetPath() == "":
		return nil, status.Error(codes.InvalidArgument, "target_path is required")
	case req.GetVolumeCapability() == nil:
		return nil, status.Error(codes.InvalidArgument, "volume_capability is required")
	case req.GetVolumeCapability().GetBlock() != nil:
		return nil, status.Error(codes.InvalidArgument, "volume_capability: a shardfs volume is a file system: use volumeMode Filesystem (a mount), not Block")
	case req.GetVolumeCapability().GetMount() == nil:
		return nil, status.Error(codes.InvalidArgument, "volume_capability: give the mount access type")
	}
	target, err := checkTarget(req.GetTargetPath())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	// A link at the target would be mounted over at its destination, and
	// an unpublish would remove the link and leave the bind behind.
	if fi, err := os.Lstat(target); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		return nil, status.Errorf(codes.InvalidArgument, "target_path %s is a symbolic link: a volume is published at a directory the kubelet made, never through a link", target)
	}
	secrets, err := checkSecrets(req.GetSecrets())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	attrs := map[string]string{}
	for k, v := range req.GetVolumeContext() {
		// The kubelet adds the pod's name, namespace and whether the
		// volume is ephemeral: facts about the pod, not the view, so they
		// must not split pods that share one.
		if !strings.HasPrefix(k, "csi.storage.k8s.io/") {
			attrs[k] = v
		}
	}
	args, err := d.cfg.Args(attrs)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := d.publish(ctx, req.GetVolumeId(), target, args, secrets); err != nil {
		return nil, d.publishStatus(err)
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

// publishStatus maps a failed publish to the code the CSI spec names.
func (d *Driver) publishStatus(err error) error {
	var ce *conflictError
	var se *StartError
	switch {
	case errors.As(err, &ce):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.As(err, &se):
		msg := d.cfg.Reword(se.Msg)
		switch se.Kind {
		case KindInvalid:
			return status.Error(codes.InvalidArgument, "volume attributes: "+msg)
		case KindNotFound:
			return status.Error(codes.NotFound, "volume attribute dataset: "+msg)
		case KindDenied:
			return status.Error(codes.Unauthenticated, "the stores refused the credentials in the volume's secrets ("+strings.Join(SecretKeys[:2], ", ")+"): "+msg)
		}
		return status.Error(codes.Internal, msg)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// checkSecrets keeps the known keys and refuses others, naming the key
// (never a value).
func checkSecrets(in map[string]string) (map[string]string, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	var unknown []string
	for k, v := range in {
		if !slices.Contains(SecretKeys, k) {
			unknown = append(unknown, k)
			continue
		}
		out[k] = v
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, fmt.Errorf("secret keys %s are not known: a shardfs volume's secret holds %s (and %s for temporary credentials)",
			strings.Join(unknown, ", "), strings.Join(SecretKeys[:2], " and "), SecretKeys[2])
	}
	if out["access_key_id"] == "" || out["secret_access_key"] == "" {
		return nil, fmt.Errorf("the volume's secret must hold both %s", strings.Join(SecretKeys[:2], " and "))
	}
	return out, nil
}

// checkTarget is a target path as the driver keeps it: absolute, with no
// ".." element (Clean would resolve one to somewhere the kubelet never
// made, such as /etc), cleaned.
func checkTarget(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("target_path %s: must be absolute", p)
	}
	if slices.Contains(strings.Split(p, "/"), "..") {
		return "", fmt.Errorf("target_path %s: must not hold a \"..\" element", p)
	}
	return filepath.Clean(p), nil
}

// NodeUnpublishVolume takes the target path's bind off and removes it; the
// view's daemon stops with its last target. It touches only a target this
// driver published for that volume: a path it never published is left as
// it is (OK: nothing of the volume is there), and one published for
// another volume is refused.
func (d *Driver) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	case req.GetTargetPath() == "":
		return nil, status.Error(codes.InvalidArgument, "target_path is required")
	}
	target, err := checkTarget(req.GetTargetPath())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := d.unpublish(req.GetVolumeId(), target); err != nil {
		var oe *otherVolumeError
		if errors.As(err, &oe) {
			return nil, status.Error(codes.NotFound, err.Error())
		}
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// NodeGetVolumeStats reports the view's memory cache and disk tier use, in
// bytes: total is their sizes, used what they hold.
func (d *Driver) NodeGetVolumeStats(ctx context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	case req.GetVolumePath() == "":
		return nil, status.Error(codes.InvalidArgument, "volume_path is required")
	}
	st, err := d.stats(req.GetVolumeId(), filepath.Clean(req.GetVolumePath()))
	if err != nil {
		return nil, status.Errorf(codes.NotFound, "volume %s at %s: %v", req.GetVolumeId(), req.GetVolumePath(), err)
	}
	total, used := st.cacheSize+st.diskSize, st.cacheUsed+st.diskUsed
	return &csi.NodeGetVolumeStatsResponse{
		Usage: []*csi.VolumeUsage{{Unit: csi.VolumeUsage_BYTES, Total: total, Used: used, Available: max(total-used, 0)}},
	}, nil
}

// NodeGetVolumeHealth reports a published volume INACCESSIBLE while its
// view's daemon is gone or does not answer, and DEGRADED while it reads
// with stores down (every byte is still verified; redundancy is spent).
func (d *Driver) NodeGetVolumeHealth(ctx context.Context, req *csi.NodeGetVolumeHealthRequest) (*csi.NodeGetVolumeHealthResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	target := req.GetVolumePublishPath()
	if target == "" {
		target = d.targetOf(req.GetVolumeId())
	}
	st, err := d.stats(req.GetVolumeId(), filepath.Clean(target))
	if target == "" || err != nil {
		return nil, status.Errorf(codes.NotFound, "volume %s is not published on this node", req.GetVolumeId())
	}
	h := &csi.VolumeHealth{VolumeId: req.GetVolumeId()}
	if st.abnormal != "" {
		h.HealthStatuses = append(h.HealthStatuses, &csi.VolumeHealth_VolumeHealthEntry{Status: csi.VolumeHealthErrorType_INACCESSIBLE, Reason: st.abnormal})
	}
	if len(st.storesDown) > 0 {
		h.HealthStatuses = append(h.HealthStatuses, &csi.VolumeHealth_VolumeHealthEntry{Status: csi.VolumeHealthErrorType_DEGRADED,
			Reason: fmt.Sprintf("stores down: %s; every byte is still verified, but the dataset can lose fewer stores (run shardfs heal)", strings.Join(st.storesDown, ", "))})
	}
	return &csi.NodeGetVolumeHealthResponse{VolumeHealth: h}, nil
}

// Package csinode is shardfs's CSI node plugin: the Identity and Node
// services of the Container Storage Interface, served over gRPC to the
// kubelet.
//
// It owns the views a node serves. A view is one mount daemon (the shardfs
// binary's mount command, run as a child process) for one distinct set of
// volume attributes and secrets. Every target path that publishes the same
// set shares that daemon, and so its memory cache and disk tier, through a
// read-only bind mount of the view's own mount point. The last unpublish
// stops it.
//
// It also owns what makes a view outlive the plugin process:
//   - the view's state on disk (StateDir/views/KEY/view.json), written
//     before each step it describes, so a restarted plugin adopts a daemon
//     that still serves, or clears the dead mounts of one that does not and
//     starts it again, and re-serves every target path;
//   - the credentials file (StateDir/views/KEY/config.json, mode 0600 in a
//     0700 directory), the only way a secret reaches the daemon: never its
//     argv, its environment, a log line or info.json;
//   - the watch on each daemon: one that exits while targets remain is
//     started again; while it cannot be, NodeGetVolumeStats reports the
//     volume abnormal, with the reason.
//
// The volume attributes and the daemon's flags are the command line's
// business: Config.Args turns one into the other, and checks them.
//
// Files:
//
//	doc.go      this comment
//	driver.go   Config, the gRPC server, the Identity and Node services
//	view.go     views: publish, unpublish, the shared daemon, stats
//	daemon.go   one mount daemon: start, ready line, watch, stop
//	mounts.go   bind mounts, stale mount clean-up
//	recover.go  what a plugin does at start with the views it finds
package csinode

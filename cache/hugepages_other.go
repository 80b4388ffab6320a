//go:build !linux

package cache

// adviseHugePages does nothing where there is no madvise(MADV_HUGEPAGE).
func adviseHugePages([]byte) {}

// endHugePages does nothing where adviseHugePages does nothing.
func endHugePages() {}

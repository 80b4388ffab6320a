package backend

// StallProbes makes every probe call stall after its timeout has started
// and before it asks its store, until the returned func is called.
func StallProbes(stall func()) (restore func()) {
	probeAboutToAsk.Store(&stall)
	return func() { probeAboutToAsk.Store(nil) }
}

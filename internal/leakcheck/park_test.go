package leakcheck

// park blocks until stop closes: a goroutine of ours for the tests.
func park(started, stop chan struct{}) {
	close(started)
	<-stop
}

//go:build race

package remote

// raceEnabled: the race detector slows steps ~10×, so timing-heavy tests
// scale down (see TestChaos).
const raceEnabled = true

//go:build race

package archtest

// RaceEnabled: the test binary runs under the race detector, where the CPU
// kernels are about ten times slower; the checks keep the cases that run
// every concurrent path and leave the longest prompts to the unit pass.
const RaceEnabled = true

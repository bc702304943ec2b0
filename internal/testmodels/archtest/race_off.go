//go:build !race

package archtest

// RaceEnabled: see race_on.go.
const RaceEnabled = false

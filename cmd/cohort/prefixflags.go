package main

import (
	"errors"
	"flag"
	"strconv"

	"cohort/actors"
)

// prefixFlags are the prefix cache's flags (vLLM's names where it has
// them): on by default, with the memory of its state snapshots.
type prefixFlags struct {
	enable       bool
	snapshotsMiB int
}

func (p *prefixFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&p.enable, "enable-prefix-caching", true, "share the KV pages of cached prompt prefixes between requests and resume after them (docs/prefix-cache.md)")
	fs.BoolFunc("no-enable-prefix-caching", "turn the prefix cache off (as --enable-prefix-caching=false)", func(v string) error {
		off, err := strconv.ParseBool(v)
		p.enable = p.enable && !off
		return err
	})
	fs.Lookup("no-enable-prefix-caching").DefValue = "false"
	fs.IntVar(&p.snapshotsMiB, "prefix-cache-snapshots-mib", 0, "memory per rank for the prefix cache's GDN state snapshots, in MiB, taken from --kv-budget-mib before slots and pages (0: an eighth of it)")
}

// apply sets the engine's prefix cache from the flags.
func (p prefixFlags) apply(cfg *actors.Config) error {
	if p.snapshotsMiB < 0 {
		return errors.New("--prefix-cache-snapshots-mib must not be negative")
	}
	cfg.DisablePrefixCache = !p.enable
	cfg.Capacity.Snapshots = int64(p.snapshotsMiB) << 20
	return nil
}

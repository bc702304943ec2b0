package main

import (
	"flag"
	"testing"

	"cohort/actors"
)

func TestPrefixFlags(t *testing.T) {
	for _, c := range []struct {
		args      []string
		disabled  bool
		snapshots int64
		err       bool
	}{
		{args: nil, snapshots: 0},
		{args: []string{"--prefix-cache-snapshots-mib", "64"}, snapshots: 64 << 20},
		{args: []string{"--enable-prefix-caching=false"}, disabled: true},
		{args: []string{"--no-enable-prefix-caching"}, disabled: true},
		{args: []string{"--prefix-cache-snapshots-mib", "-1"}, err: true},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		var p prefixFlags
		p.register(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		var cfg actors.Config
		err := p.apply(&cfg)
		if (err != nil) != c.err || err == nil && (cfg.DisablePrefixCache != c.disabled || cfg.Capacity.Snapshots != c.snapshots) {
			t.Errorf("%v: disabled %v, snapshots %d, %v", c.args, cfg.DisablePrefixCache, cfg.Capacity.Snapshots, err)
		}
	}
}

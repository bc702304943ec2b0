package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"cohort/internal/testmodels/modelgen"
)

func runMakeModel(_ context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("make-model", flag.ContinueOnError)
	preset := fs.String("preset", "tiny", "model shape: "+strings.Join(modelgen.PresetNames(), ", "))
	out := fs.String("out", "", "output directory (required)")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if *out == "" {
		return fmt.Errorf("make-model: --out is required")
	}
	p, ok := modelgen.Presets[*preset]
	if !ok {
		return fmt.Errorf("make-model: unknown preset %q (have %s)", *preset, strings.Join(modelgen.PresetNames(), ", "))
	}
	if err := modelgen.Write(*out, p); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s model to %s\n", p.Name, *out)
	return nil
}

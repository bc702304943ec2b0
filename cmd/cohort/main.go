// Command cohort runs Qwen3.5 models: it serves them over an OpenAI-compatible
// HTTP API (serve), hosts rank actors for an engine in another process
// (worker), writes random test checkpoints (make-model), generates text,
// scores token sequences, benchmarks the engine (bench) and writes the
// certificates of the actor ports (gen-certs). Run `cohort help` for usage.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
)

// command is one subcommand.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout io.Writer) error
}

// commands is filled by init: the commands' -h output reads the summaries,
// so a composite literal here would be an initialization cycle.
var commands map[string]command

func init() {
	commands = map[string]command{
		"make-model": {"write a deterministic random-weight checkpoint", runMakeModel},
		"generate":   {"generate text from a prompt (streams to stdout)", runGenerate},
		"score":      {"print per-position top-k logprobs of a token sequence as JSON", runScore},
		"serve":      {"serve the model over an OpenAI-compatible HTTP API", runServe},
		"bench":      {"measure decode, prefill and TTFT through the engine", runBench},
		"worker":     {"host rank actors for `serve --workers` (ranks in other processes)", runWorker},
		"gen-certs":  {"write a cluster CA and node certificate for mutual TLS on the actor ports", runGenCerts},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := dispatch(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "cohort:", err)
		os.Exit(1)
	}
}

func dispatch(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		return nil
	}
	cmd, ok := commands[args[0]]
	if !ok {
		usage(os.Stderr)
		return fmt.Errorf("unknown command %q", args[0])
	}
	if err := cmd.run(ctx, args[1:], stdout); !errors.Is(err, flag.ErrHelp) {
		return err
	}
	return nil // -h: the usage went to stdout
}

// parseFlags parses a command's flags. With -h, -help or --help it writes
// the command's usage to stdout and returns flag.ErrHelp, which dispatch
// turns into success (exit 0). A bad flag, or an argument after the flags
// (no command takes any), is an error that points at -h; nothing is
// printed for it here (main prints the error).
func parseFlags(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprintf(stdout, "usage: cohort %s [flags]\n\n", fs.Name())
		if c, ok := commands[fs.Name()]; ok {
			fmt.Fprintf(stdout, "%s.\n\n", c.summary)
		}
		fmt.Fprintln(stdout, "flags (-name or --name):")
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return err
	case err != nil:
		return fmt.Errorf("%s: %w (cohort %s -h lists the flags)", fs.Name(), err, fs.Name())
	case fs.NArg() > 0:
		return fmt.Errorf("%s: unexpected arguments %q (cohort %s -h lists the flags)", fs.Name(), fs.Args(), fs.Name())
	}
	return nil
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: cohort <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-11s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun `cohort <command> -h` for a command's flags.")
}

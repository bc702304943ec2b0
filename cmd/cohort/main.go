// Command cohort runs Qwen3.5 models: it generates random test checkpoints,
// generates text and scores token sequences. Run `cohort help` for usage.
package main

import (
	"context"
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

var commands = map[string]command{
	"make-model": {"write a deterministic random-weight checkpoint", runMakeModel},
	"generate":   {"generate text from a prompt (streams to stdout)", runGenerate},
	"score":      {"print per-position top-k logprobs of a token sequence as JSON", runScore},
	"serve":      {"serve the model over an OpenAI-compatible HTTP API", runServe},
	"bench":      {"measure decode, prefill and TTFT through the engine", runBench},
	"worker":     {"host rank actors for `serve --workers` (ranks in other processes)", runWorker},
	"gen-certs":  {"write a cluster CA and node certificate for mutual TLS on the actor ports", runGenCerts},
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
	return cmd.run(ctx, args[1:], stdout)
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

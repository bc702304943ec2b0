package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/trace"

	"cohort/actors"
	"cohort/actors/remote"
	"cohort/httpapi"
	"cohort/httpapi/chattemplate"
	"cohort/httpapi/telemetry"
	"cohort/model"
	_ "cohort/model/all" // registers every architecture
)

// shutdownGrace bounds how long in-flight requests may finish after
// SIGINT/SIGTERM before they are cancelled.
const shutdownGrace = 30 * time.Second

func runServe(ctx context.Context, args []string, stdout io.Writer) error {
	fs, run := newPlacementFlagSet("serve", "tensor-parallel degree (ranks)")
	host := fs.String("host", "127.0.0.1", "address to listen on")
	port := fs.Int("port", 8000, "port to listen on (0 picks a free one)")
	name := fs.String("served-model-name", "", "model id clients send (default: the model directory's name)")
	maxModelLen := fs.Int("max-model-len", 0, "longest request, prompt + output, in tokens (0: the model's max_position_embeddings)")
	maxPrefill := fs.Int("max-prefill-tokens", 0, maxPrefillUsage)
	kvBudget := fs.Int("kv-budget-mib", 0, "memory per rank for KV pages and request state, in MiB (0: on cuda, the device's free memory once the weights and the largest step's scratch are in, less a 1 GiB reserve; on cpu, 512)")
	maxPending := fs.Int("max-pending", 0, "requests the engine holds before answering 429 (0: 16 × the slots)")
	workers := fs.String("workers", "", "comma-separated host:port of the cohort worker processes to place the ranks on (default: ranks in this process)")
	remoteListen := fs.String("remote-listen", "127.0.0.1:0", "with --workers: this engine's actor-remote address; the workers must reach it")
	ranksPerWorker := fs.Int("ranks-per-worker", 0, "with --workers: at most this many ranks on one worker (0: ⌈tp / workers⌉)")
	readTimeout := fs.Duration("read-timeout", 30*time.Second, "bound on reading one request, headers and body (slow clients are cut); negative: none")
	writeTimeout := fs.Duration("write-timeout", 30*time.Second, "bound on each write of a response (a client that stops reading is cut; streams to reading clients are not); negative: none")
	idleTimeout := fs.Duration("idle-timeout", time.Minute, "a kept-alive connection with no request is closed after this; negative: never")
	maxConns := fs.Int("max-conns", 0, "open connections at most; over it the oldest idle one is closed (0: the open-file limit less a reserve; negative: no limit)")
	maxConnsPerIP := fs.Int("max-conns-per-ip", 256, "connections from one address at most; over it new ones are closed (negative: no limit)")
	keepAlive := fs.Duration("sse-keepalive", 2*time.Second, "a stream silent this long gets an SSE comment line (negative: never)")
	maxRequestTokens := fs.Int("max-request-tokens", 0, "bound on what one request queues, Σ over prompts × n of prompt + max_tokens; over it a 400 (0: 4 × max-model-len; negative: none)")
	var policy failurePolicy
	policy.register(fs)
	var sec securityFlags
	sec.register(fs)
	var cache prefixFlags
	cache.register(fs)
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	*maxPrefill = run.maxPrefill(*maxPrefill)
	switch {
	case run.tp < 1 || *maxPrefill < 1 || *kvBudget < 0 || *maxModelLen < 0 || *maxPending < 0:
		return errors.New("serve: --tp and --max-prefill-tokens must be positive; --kv-budget-mib, --max-model-len and --max-pending not negative")
	case *port < 0 || *port > 65535:
		return fmt.Errorf("serve: --port %d is out of range", *port)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	logf := log.New(os.Stderr, "cohort: ", log.LstdFlags).Printf

	modelDir, err := resolveModelDir(run.dir)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	switch {
	case *name != "":
	case run.dir == "":
		*name = "cohort-tiny"
	default:
		*name = filepath.Base(filepath.Clean(modelDir))
	}
	ck, tok, err := openCheckpoint(modelDir)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	defer ck.Close()
	chat, err := chattemplate.LoadConfig(modelDir)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if chat.Template == "" {
		logf("model %s has no chat template: /v1/chat/completions is disabled", modelDir)
	}

	tracing, shutdownTracing, err := setupTracing(ctx, logf)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	defer shutdownTracing()

	newBackend, lockThread, elemBytes, err := backendFactory(run.device, run.rankThreads())
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	var observer supervisionObserver
	cfg := actors.Config{
		Checkpoint: ck, Tokenizer: tok, TP: run.tp,
		NewBackend: newBackend, LockThread: lockThread,
		Capacity:         serveCapacity(run.device, *kvBudget, elemBytes, *maxModelLen),
		MaxPrefillTokens: *maxPrefill, MaxRows: serveMaxSeqs, MaxPending: *maxPending,
		StepDeadline: policy.stepDeadline, StepTarget: policy.stepTarget, ProgressTimeout: policy.progressTimeout, MaxReplays: policy.maxReplays, Replay: policy.replay, MaxRebuilds: policy.maxRebuilds,
		RebuildWindow: policy.rebuildWindow, Faults: policy.debugFaults, TracerProvider: tracing,
	}
	if list := workerList(*workers); len(list) > 0 {
		cfg.NewBackend = nil
		security, err := sec.security()
		if err != nil {
			return fmt.Errorf("serve: --workers: %w", err)
		}
		ids, err := workerCollective(run.device)
		if err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		cfg.Placement = remote.Placement(remote.Config{Workers: list, Listen: *remoteListen, ModelDir: modelDir, RanksPerWorker: *ranksPerWorker,
			Security: security, NCCL: ids})
		logf("placing %d ranks on workers %s (this engine at %s)", run.tp, strings.Join(list, ", "), *remoteListen)
	}
	if err := cache.apply(&cfg); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	observer.hooks(&cfg)
	if err := configureDevices(&cfg, run.device, run.devices); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	eng, err := actors.Start(ctx, cfg)
	if err != nil {
		return fmt.Errorf("serve: starting the engine: %w", err)
	}
	defer eng.Close()

	if d := samplingDefaults(ck.Generation); d != (httpapi.SamplingDefaults{}) {
		logf("sampling defaults from %s/generation_config.json: %s (requests may override them)", modelDir, d)
	}
	opts := httpapi.Options{ModelName: *name, Tokenizer: tok, ChatTemplate: chat.Template,
		BOS: chat.BOS, EOS: chat.EOS, Sampling: samplingDefaults(ck.Generation), TracerProvider: tracing, Logf: logf,
		ReadTimeout: *readTimeout, WriteTimeout: *writeTimeout, IdleTimeout: *idleTimeout,
		MaxConns: *maxConns, MaxConnsPerIP: *maxConnsPerIP, MaxRequestTokens: *maxRequestTokens, KeepAlive: *keepAlive}
	if policy.debugFaults {
		opts.InjectFault = eng.InjectFault
		logf("fault injection is ON: POST /debug/faults")
	}
	srv, err := httpapi.New(eng, opts)
	if err != nil {
		return err
	}
	observer.attach(srv.Metrics(), tracing)
	ln, err := net.Listen("tcp", net.JoinHostPort(*host, strconv.Itoa(*port)))
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	info := eng.Info()
	fmt.Fprintf(stdout, "cohort: serving %s on http://%s (tp=%d, max_model_len=%d, slots=%d, kv_pages=%d, scratch_mib=%d, max_step_tokens=%d)\n",
		*name, ln.Addr(), info.TP, info.MaxModelLen, info.Slots, info.KVPages, info.Scratch>>20, info.MaxStepTokens)

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	var cause error
	select {
	case <-ctx.Done():
		logf("shutting down: waiting up to %s for in-flight requests", shutdownGrace)
	case <-eng.Done():
		cause = fmt.Errorf("serve: the engine stopped: %w", eng.Err())
		logf("%v; shutting down", cause)
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		logf("shutdown: %v (in-flight requests were cancelled)", err)
	}
	if err := <-served; err != nil && cause == nil {
		cause = fmt.Errorf("serve: %w", err)
	}
	return cause
}

// workerCollective is the NCCL unique-id source of ranks on workers: none
// for CPU ranks (the TCP ring), ncclGetUniqueId in this process for GPU
// ranks (every generation's group gets a fresh id).
func workerCollective(device string) (remote.UniqueIDSource, error) {
	if device != "cuda" {
		return nil, nil
	}
	return engineNCCL()
}

// The shape of serve's engine: concurrent requests (and sequences per
// step), the default prefill tokens per step, and KV page size.
const (
	serveMaxSeqs    = 64
	serveMaxPrefill = 2048 // on the CPU (maxPrefillFor)
	// cudaServeMaxPrefill is serve's prefill tokens per step on a GPU.
	cudaServeMaxPrefill = 8192
	servePageSize       = 16
)

// cpuServeBudgetMiB is serve's state budget per CPU rank when
// --kv-budget-mib is unset: the CPU backend reports no device memory to
// plan from.
const cpuServeBudgetMiB = 512

// serveCapacity is serve's capacity input per rank on device, for
// --kv-budget-mib budgetMiB and --max-model-len maxModelLen, with
// elemBytes per state element.
func serveCapacity(device string, budgetMiB, elemBytes, maxModelLen int) model.CapacityInput {
	return model.CapacityInput{Budget: serveBudget(device, budgetMiB), ElemBytes: elemBytes, PageSize: servePageSize,
		MaxSeqs: serveMaxSeqs, MaxModelLen: maxModelLen}
}

// serveBudget is the capacity budget per rank for --kv-budget-mib mib on
// device: as given; unset (0), cpuServeBudgetMiB on the CPU, and 0 on a
// GPU, which the rank fills with what the device has free once its weights
// and its step scratch are in.
func serveBudget(device string, mib int) int64 {
	if mib == 0 && device != "cuda" {
		mib = cpuServeBudgetMiB
	}
	return int64(mib) << 20
}

// setupTracing sets up OpenTelemetry from the OTEL_* variables; the
// returned function flushes and shuts it down, within 5 s, logging what it
// could not flush.
func setupTracing(ctx context.Context, logf func(string, ...any)) (trace.TracerProvider, func(), error) {
	tracing, shutdown, err := telemetry.Setup(ctx, os.Getenv)
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: %w", err)
	}
	return tracing, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdown(sctx); err != nil {
			logf("flushing traces: %v", err)
		}
	}, nil
}

// samplingDefaults are generation_config.json's sampling values as the
// defaults of requests that leave them unset (vLLM's --generation-config
// auto).
func samplingDefaults(g *model.GenerationConfig) httpapi.SamplingDefaults {
	if g == nil {
		return httpapi.SamplingDefaults{}
	}
	return httpapi.SamplingDefaults{Temperature: g.Temperature, TopP: g.TopP, TopK: g.TopK, MinP: g.MinP,
		RepetitionPenalty: g.RepetitionPenalty}
}

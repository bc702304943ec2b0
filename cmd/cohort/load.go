package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"

	"cohort/internal/testmodels/modelgen"
	"cohort/kernels"
	"cohort/model"
	_ "cohort/model/all" // registers every architecture
	"cohort/model/tokenizer"
)

// loaded is a model ready to run on one rank.
type loaded struct {
	ck  *model.Checkpoint
	m   model.Model
	be  kernels.Backend
	tok *tokenizer.Tokenizer
}

// builtinDir returns the directory of the built-in default model (the tiny
// preset), generating it on first use. It needs no network.
func builtinDir() (string, error) {
	dir := filepath.Join(os.TempDir(), "cohort-builtin-tiny-v4")
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors")); err == nil {
		return dir, nil
	}
	tmp, err := os.MkdirTemp(os.TempDir(), "cohort-builtin-")
	if err != nil {
		return "", err
	}
	if err := modelgen.Write(tmp, modelgen.Presets["tiny"]); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		os.RemoveAll(tmp)
		if _, statErr := os.Stat(dir); statErr == nil {
			return dir, nil // another process won the race
		}
		return "", err
	}
	return dir, nil
}

// resolveModelDir is dir, or the built-in model's directory when dir is empty.
func resolveModelDir(dir string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	dir, err := builtinDir()
	if err != nil {
		return "", fmt.Errorf("built-in model: %w", err)
	}
	return dir, nil
}

// openCheckpoint opens the checkpoint in dir and its tokenizer.
func openCheckpoint(dir string) (*model.Checkpoint, *tokenizer.Tokenizer, error) {
	ck, err := model.Open(dir)
	if err != nil {
		return nil, nil, err
	}
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		ck.Close()
		return nil, nil, err
	}
	return ck, tok, nil
}

// loadModelOn opens dir (or the built-in model when dir is empty) on one
// rank of device ("cpu" or "cuda"; threads bounds the CPU backend's workers,
// 0 = GOMAXPROCS). For "cuda" the caller must run on a goroutine locked to
// its OS thread (onDeviceThread) and make every later call on the model from
// that goroutine.
func loadModelOn(dir, device string, threads int) (*loaded, error) {
	newBackend, _, _, err := backendFactory(device, threads)
	if err != nil {
		return nil, err
	}
	if dir, err = resolveModelDir(dir); err != nil {
		return nil, err
	}
	ck, err := model.Open(dir)
	if err != nil {
		return nil, err
	}
	be, err := newBackend(model.Single, nil)
	if err != nil {
		ck.Close()
		return nil, err
	}
	m, err := ck.Load(be, model.Single)
	if err != nil {
		closeBackend(be)
		ck.Close()
		return nil, err
	}
	l := &loaded{ck: ck, m: m, be: be}
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err == nil {
		if l.tok, err = tokenizer.Load(filepath.Join(dir, "tokenizer.json")); err != nil {
			l.Close()
			return nil, err
		}
	}
	return l, nil
}

// Close releases the checkpoint and, for backends that hold device memory,
// the backend.
func (l *loaded) Close() {
	closeBackend(l.be)
	l.ck.Close()
}

// resetScratch reclaims the backend's per-step scratch (the CUDA arena)
// once a step's results are on the host.
func (l *loaded) resetScratch() {
	if r, ok := l.be.(kernels.ScratchResetter); ok {
		r.ResetScratch()
	}
}

func closeBackend(be kernels.Backend) {
	if c, ok := be.(interface{ Close() error }); ok {
		c.Close()
	}
}

// onDeviceThread runs fn on a new goroutine locked to its OS thread and
// waits for it: a CUDA backend must be made, used and closed on one thread.
// A panic in fn (the CUDA ops panic on device errors) comes back as an error.
func onDeviceThread(fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Errorf("panic: %v\n%s", r, debug.Stack())
			}
		}()
		done <- fn()
	}()
	return <-done
}

// onModel loads p's model on one rank in a device thread (onDeviceThread),
// resolves in's prompts with its tokenizer and runs fn there.
func onModel(p placementFlags, in promptInput, fn func(l *loaded, prompts [][]int32) error) error {
	return onDeviceThread(func() error {
		l, err := loadModelOn(p.dir, p.device, p.threads)
		if err != nil {
			return err
		}
		defer l.Close()
		if in.ids == nil {
			if err := l.needTokenizer(); err != nil {
				return err
			}
		}
		prompts, err := in.prompts(l.tok, l.ck.Config.VocabSize)
		if err != nil {
			return err
		}
		return fn(l, prompts)
	})
}

func (l *loaded) needTokenizer() error {
	if l.tok == nil {
		return fmt.Errorf("model %s has no tokenizer.json", l.ck.Dir)
	}
	return nil
}

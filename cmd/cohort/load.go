package main

import (
	"fmt"
	"os"
	"path/filepath"

	"cohort/kernels"
	"cohort/kernels/cpu"
	"cohort/model"
	"cohort/model/modelgen"
	_ "cohort/model/qwen35" // registers the Qwen3.5 architectures
	"cohort/model/tokenizer"
)

// loaded is a model ready to run on one CPU rank.
type loaded struct {
	ck  *model.Checkpoint
	m   model.Model
	be  kernels.Backend
	tok *tokenizer.Tokenizer
}

// builtinDir returns the directory of the built-in default model (the tiny
// preset), generating it on first use. It needs no network.
func builtinDir() (string, error) {
	dir := filepath.Join(os.TempDir(), "cohort-builtin-tiny-v2")
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

// loadModel opens dir (or the built-in model when dir is empty) on the CPU backend.
func loadModel(dir string) (*loaded, error) {
	if dir == "" {
		var err error
		if dir, err = builtinDir(); err != nil {
			return nil, fmt.Errorf("built-in model: %w", err)
		}
	}
	ck, err := model.Open(dir)
	if err != nil {
		return nil, err
	}
	be := cpu.New(cpu.Options{})
	m, err := ck.Load(be, model.Single)
	if err != nil {
		ck.Close()
		return nil, err
	}
	l := &loaded{ck: ck, m: m, be: be}
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err == nil {
		if l.tok, err = tokenizer.Load(filepath.Join(dir, "tokenizer.json")); err != nil {
			ck.Close()
			return nil, err
		}
	}
	return l, nil
}

func (l *loaded) needTokenizer() error {
	if l.tok == nil {
		return fmt.Errorf("model %s has no tokenizer.json", l.ck.Dir)
	}
	return nil
}

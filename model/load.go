package model

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"cohort/kernels"
	"cohort/model/safetensors"
)

// Checkpoint is an opened Hugging Face model directory: its config, its
// architecture and its (memory-mapped) tensors under canonical names.
type Checkpoint struct {
	Dir    string
	Config *Config
	Arch   Architecture
	// Generation is generation_config.json (empty when there is none).
	Generation *GenerationConfig
	// EOSToken is tokenizer_config.json's eos_token ("" when none); EOS
	// looks it up.
	EOSToken string

	files   *safetensors.File
	names   map[string]string // canonical -> name in the files
	ignored []string          // names skipped on purpose (vision, MTP)
}

// CanonicalName maps a checkpoint tensor name to the name architectures
// declare: the model.language_model. (nested) or model. (flat) prefix is
// removed. Vision-tower and MTP tensors are skipped.
func CanonicalName(name string) (canon string, skip bool) {
	switch {
	case strings.HasPrefix(name, "model.visual."), strings.HasPrefix(name, "mtp."),
		strings.HasPrefix(name, "model.mtp."), strings.HasPrefix(name, "model.language_model.mtp."):
		return "", true
	case strings.HasPrefix(name, "model.language_model."):
		return strings.TrimPrefix(name, "model.language_model."), false
	case strings.HasPrefix(name, "model."):
		return strings.TrimPrefix(name, "model."), false
	}
	return name, false
}

// Open reads DIR's config.json (and generation_config.json and the
// eos_token of tokenizer_config.json when they exist), finds its
// architecture and maps its tensors.
func Open(dir string) (*Checkpoint, error) {
	cfg, err := ReadConfig(dir)
	if err != nil {
		return nil, err
	}
	arch, err := Lookup(cfg.Architecture)
	if err != nil {
		return nil, err
	}
	gen, err := ReadGenerationConfig(dir)
	if err != nil {
		return nil, err
	}
	eosToken, err := readEOSToken(dir)
	if err != nil {
		return nil, err
	}
	files, err := safetensors.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	ck := &Checkpoint{Dir: dir, Config: cfg, Arch: arch, Generation: gen, EOSToken: eosToken, files: files,
		names: map[string]string{}}
	for _, n := range files.Names() {
		canon, skip := CanonicalName(n)
		if skip {
			ck.ignored = append(ck.ignored, n)
			continue
		}
		if prev, dup := ck.names[canon]; dup {
			files.Close()
			return nil, fmt.Errorf("model: tensors %q and %q both map to %q", prev, n, canon)
		}
		ck.names[canon] = n
	}
	ck.resolveTying()
	return ck, nil
}

// resolveTying decides tied vs untied from the flag and from whether
// lm_head.weight exists: a checkpoint without lm_head.weight can only be
// tied, and a tied flag makes lm_head.weight unused (as in transformers).
func (c *Checkpoint) resolveTying() {
	_, hasHead := c.names["lm_head.weight"]
	if !hasHead {
		c.Config.TieEmbeddings = true
		return
	}
	if c.Config.TieEmbeddings {
		c.ignored = append(c.ignored, c.names["lm_head.weight"])
		delete(c.names, "lm_head.weight")
	}
}

// Close unmaps the checkpoint's files.
func (c *Checkpoint) Close() error { return c.files.Close() }

// Ignored lists tensors that were skipped on purpose (vision, MTP, an
// unused lm_head).
func (c *Checkpoint) Ignored() []string { return slices.Clone(c.ignored) }

// Load declares the architecture's weights for shard, checks that the
// checkpoint has exactly those tensors with those shapes, cuts each one to
// the shard's part and uploads it to the backend.
func (c *Checkpoint) Load(be kernels.Backend, shard Shard) (Model, error) {
	decls, err := c.Arch.Declare(c.Config, shard)
	if err != nil {
		return nil, err
	}
	if err := c.audit(decls); err != nil {
		return nil, err
	}
	weights := make(map[string]kernels.Tensor, len(decls))
	upload := be.Upload
	if wu, ok := be.(kernels.WeightUploader); ok {
		upload = wu.UploadWeight
	}
	for _, d := range decls {
		t, _ := c.files.Tensor(c.names[d.Name])
		full, err := t.Float32()
		if err != nil {
			return nil, fmt.Errorf("model: %s: %w", d.Name, err)
		}
		part, shape, err := d.ShardData(full, shard)
		if err != nil {
			return nil, err
		}
		weights[d.Name] = upload(part, shape...)
	}
	return c.Arch.Build(c.Config, shard, weights)
}

// audit reports every missing, unexpected or wrongly shaped tensor at once.
func (c *Checkpoint) audit(decls []WeightDecl) error {
	var problems []string
	declared := make(map[string]bool, len(decls))
	for _, d := range decls {
		declared[d.Name] = true
		name, ok := c.names[d.Name]
		if !ok {
			problems = append(problems, "missing "+d.Name)
			continue
		}
		t, _ := c.files.Tensor(name)
		if !slices.Equal(t.Shape, d.Shape) {
			problems = append(problems, fmt.Sprintf("%s has shape %v, want %v", name, t.Shape, d.Shape))
		}
	}
	for canon, name := range c.names {
		if !declared[canon] {
			problems = append(problems, "unexpected "+name)
		}
	}
	if len(problems) == 0 {
		return nil
	}
	sort.Strings(problems)
	return fmt.Errorf("model: checkpoint %s does not match %s: %s", c.Dir, c.Config.Architecture, strings.Join(problems, "; "))
}

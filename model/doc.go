// Package model is what a rank knows of a checkpoint: its config.json and
// generation_config.json, the architecture registry, the safetensors
// weights, the shard plan that places each weight on a rank, the capacity
// plan that sizes KV pages and state slots, and the per-request state
// (model.State) that the rank owns outside the immutable model. The
// architectures (model/qwen35) register themselves; the tokenizer lives in
// model/tokenizer and sampling in model/sample.
package model

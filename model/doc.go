// Package model is what a rank knows of a checkpoint: its config.json and
// generation_config.json, the architecture registry, the safetensors
// weights, the shard plan that places each weight on a rank and the
// capacity plan that sizes KV pages and state slots. Everything particular
// to a model family (its own config fields, the shape and size of its
// per-request state, its weights and forward pass) belongs to its
// Architecture, in a package of its own (model/qwen35); model/all
// registers them all. The per-request state (model.State) is opaque here
// and owned by the rank, outside the immutable model. The tokenizer lives
// in model/tokenizer and sampling in model/sample.
package model

package model

import (
	"fmt"

	"cohort/kernels"
)

// What the decoder architectures share on one rank: the shard check, the
// attention shapes, the all-reduce of a block's output and the vocabulary
// ends (embedding, final norm, LM head).

// ShardDim is a config dimension the tensor-parallel degree must divide.
type ShardDim struct {
	Name string // the config.json field
	N    int
}

// CheckShard reports whether s is a valid shard of a decoder of arch with
// config c: its degree must divide the attention heads, the MLP's
// intermediate size, the vocabulary and every extra dim, and fit the KV
// heads (divide them, or they divide it: each KV head then replicated over
// several ranks).
func CheckShard(arch string, c *Config, s Shard, extra ...ShardDim) error {
	if s.Size < 1 || s.Rank < 0 || s.Rank >= s.Size {
		return fmt.Errorf("%s: invalid shard %d of %d", arch, s.Rank, s.Size)
	}
	dims := append([]ShardDim{{"num_attention_heads", c.Heads}}, extra...)
	dims = append(dims, ShardDim{"intermediate_size", c.Intermediate}, ShardDim{"vocab_size", c.VocabSize})
	for _, d := range dims {
		if d.N%s.Size != 0 {
			return fmt.Errorf("%s: tensor-parallel degree %d does not divide %s = %d", arch, s.Size, d.Name, d.N)
		}
	}
	if c.KVHeads%s.Size != 0 && s.Size%c.KVHeads != 0 {
		return fmt.Errorf("%s: tensor-parallel degree %d and num_key_value_heads = %d: neither divides the other", arch, s.Size, c.KVHeads)
	}
	return nil
}

// AttnConfig is one rank's attention shapes: its share of the query heads
// and of the KV heads (one replicated KV head when there are fewer than
// ranks).
func AttnConfig(c *Config, s Shard) kernels.AttnConfig {
	return kernels.AttnConfig{Heads: c.Heads / s.Size, KVHeads: max(c.KVHeads/s.Size, 1), HeadDim: c.HeadDim,
		RotaryDim: c.RotaryDim(), Theta: c.RopeTheta}
}

// AllReduce sums a block's output x over the ranks of s in place (nothing
// to do on one rank).
func AllReduce(be kernels.Backend, s Shard, x kernels.Tensor) error {
	if s.Size == 1 {
		return nil
	}
	return be.AllReduce(x)
}

// Decoder is what a decoder architecture's model bound to one rank's
// weights holds besides its layers.
type Decoder struct {
	ID     uint64 // NewID: keys recorded steps
	Config *Config
	Shard  Shard
	Attn   kernels.AttnConfig // this rank's attention shapes
	Vocab  Vocab
}

// NewDecoder binds the shared pieces of c's model for shard s, taking the
// vocabulary's weights through get.
func NewDecoder(c *Config, s Shard, get func(name string) kernels.Tensor) Decoder {
	return Decoder{ID: NewID(), Config: c, Shard: s, Attn: AttnConfig(c, s), Vocab: BindVocab(c, s, get)}
}

// Vocab holds a decoder's vocabulary ends on one rank: its rows of the
// embedding (the vocabulary is split by row, this rank's from Start), the
// final norm and the LM head (the embedding itself when tied).
type Vocab struct {
	Embed, Norm, LMHead kernels.Tensor
	Start               int
}

// BindVocab takes the weights of the ends through get: embed_tokens, norm
// and, unless tied, lm_head.
func BindVocab(c *Config, s Shard, get func(name string) kernels.Tensor) Vocab {
	v := Vocab{Embed: get("embed_tokens.weight"), Norm: get("norm.weight"), Start: s.Rank * c.VocabSize / s.Size}
	v.LMHead = v.Embed
	if !c.TieEmbeddings {
		v.LMHead = get("lm_head.weight")
	}
	return v
}

// Embedding returns the embeddings of tokens, summed over the ranks (each
// holds its rows and zeros for the others).
func (v Vocab) Embedding(be kernels.Backend, s Shard, tokens []int32) (kernels.Tensor, error) {
	x := be.Embedding(v.Embed, tokens, v.Start)
	if err := AllReduce(be, s, x); err != nil {
		return nil, err
	}
	return x, nil
}

// Logits applies the LM head to the final hidden states h (normalized
// already) and gathers the vocabulary shards of the ranks.
func (v Vocab) Logits(be kernels.Backend, s Shard, h kernels.Tensor) (kernels.Tensor, error) {
	logits := be.Linear(h, v.LMHead)
	if s.Size > 1 {
		return be.AllGatherCols(logits)
	}
	return logits, nil
}

package qwen3_test

import (
	"fmt"
	"math"
	"testing"

	"cohort/internal/testmodels/archtest"
	"cohort/kernels/cpu"
	"cohort/kernels/kernelstest"
	"cohort/model"
	"cohort/model/safetensors"
)

// ref is a float64 Qwen3 forward pass written from the Hugging Face
// definition (Qwen3ForCausalLM) straight over the checkpoint's tensors: no
// backend, no cache, no sharding. It is the check of the forward pass's
// semantics that needs no Python.
type ref struct {
	c *model.Config
	w func(name string) []float64
}

// linear returns x·wᵀ for x [T, in] and w [out, in].
func linear(x [][]float64, w []float64) [][]float64 {
	in := len(x[0])
	out := len(w) / in
	y := make([][]float64, len(x))
	for t, row := range x {
		y[t] = make([]float64, out)
		for o := range out {
			var s float64
			for i, v := range row {
				s += v * w[o*in+i]
			}
			y[t][o] = s
		}
	}
	return y
}

// norm is Qwen3RMSNorm per group of len(w): x / rms(x) · w.
func (r ref) norm(x []float64, w []float64) []float64 {
	g := len(w)
	y := make([]float64, len(x))
	for s := 0; s < len(x); s += g {
		var ss float64
		for _, v := range x[s : s+g] {
			ss += v * v
		}
		inv := 1 / math.Sqrt(ss/float64(g)+float64(r.c.Eps))
		for j := range g {
			y[s+j] = x[s+j] * inv * w[j]
		}
	}
	return y
}

// rope rotates every head of x at position p (rotate-half pairing).
func (r ref) rope(x []float64, p int) {
	hd := r.c.HeadDim
	half := hd / 2
	for h := 0; h < len(x); h += hd {
		for j := range half {
			ang := float64(p) / math.Pow(r.c.RopeTheta, float64(2*j)/float64(hd))
			c, s := math.Cos(ang), math.Sin(ang)
			a, b := x[h+j], x[h+j+half]
			x[h+j], x[h+j+half] = a*c-b*s, b*c+a*s
		}
	}
}

// logits returns the logits [T][vocab] of every position of ids.
func (r ref) logits(ids []int32) [][]float64 {
	c := r.c
	H, hd := c.HiddenSize, c.HeadDim
	embed := r.w("model.embed_tokens.weight")
	x := make([][]float64, len(ids))
	for t, id := range ids {
		x[t] = append([]float64(nil), embed[int(id)*H:(int(id)+1)*H]...)
	}
	for l := range c.NumLayers {
		p := fmt.Sprintf("model.layers.%d.", l)
		h := make([][]float64, len(x))
		for t := range x {
			h[t] = r.norm(x[t], r.w(p+"input_layernorm.weight"))
		}
		q, k, v := linear(h, r.w(p+"self_attn.q_proj.weight")), linear(h, r.w(p+"self_attn.k_proj.weight")), linear(h, r.w(p+"self_attn.v_proj.weight"))
		for t := range x {
			q[t], k[t] = r.norm(q[t], r.w(p+"self_attn.q_norm.weight")), r.norm(k[t], r.w(p+"self_attn.k_norm.weight"))
			r.rope(q[t], t)
			r.rope(k[t], t)
		}
		att := make([][]float64, len(x))
		group := c.Heads / c.KVHeads
		for t := range x {
			att[t] = make([]float64, c.Heads*hd)
			for head := range c.Heads {
				kv := head / group
				scores := make([]float64, t+1)
				mx := math.Inf(-1)
				for j := 0; j <= t; j++ {
					var s float64
					for d := range hd {
						s += q[t][head*hd+d] * k[j][kv*hd+d]
					}
					scores[j] = s / math.Sqrt(float64(hd))
					mx = math.Max(mx, scores[j])
				}
				var sum float64
				for j := range scores {
					scores[j] = math.Exp(scores[j] - mx)
					sum += scores[j]
				}
				for j, e := range scores {
					for d := range hd {
						att[t][head*hd+d] += e / sum * v[j][kv*hd+d]
					}
				}
			}
		}
		o := linear(att, r.w(p+"self_attn.o_proj.weight"))
		for t := range x {
			for i := range x[t] {
				x[t][i] += o[t][i]
			}
			h[t] = r.norm(x[t], r.w(p+"post_attention_layernorm.weight"))
		}
		gate, up := linear(h, r.w(p+"mlp.gate_proj.weight")), linear(h, r.w(p+"mlp.up_proj.weight"))
		for t := range gate {
			for i, g := range gate[t] {
				gate[t][i] = g / (1 + math.Exp(-g)) * up[t][i]
			}
		}
		down := linear(gate, r.w(p+"mlp.down_proj.weight"))
		for t := range x {
			for i := range x[t] {
				x[t][i] += down[t][i]
			}
		}
	}
	for t := range x {
		x[t] = r.norm(x[t], r.w("model.norm.weight"))
	}
	return linear(x, r.w("lm_head.weight"))
}

// TestMatchesFloat64Reference: the CPU forward pass of qwen3-tiny agrees
// with the float64 reference within 1e-4 of the largest logit.
func TestMatchesFloat64Reference(t *testing.T) {
	ck := openTiny(t)
	files, err := safetensors.Open(ck.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer files.Close()
	r := ref{c: ck.Config, w: func(name string) []float64 {
		tn, ok := files.Tensor(name)
		if !ok {
			t.Fatalf("no tensor %s", name)
		}
		f, err := tn.Float32()
		if err != nil {
			t.Fatal(err)
		}
		out := make([]float64, len(f))
		for i, v := range f {
			out[i] = float64(v)
		}
		return out
	}}
	ids := archtest.Prompt(20, ck.Config.VocabSize, 5)
	want := r.logits(ids)
	be := cpu.New(cpu.Options{})
	m, err := ck.Load(be, model.Single)
	if err != nil {
		t.Fatal(err)
	}
	got, err := model.NewSession(be, m, len(ids)).Step(ids, true)
	if err != nil {
		t.Fatal(err)
	}
	flat := make([]float32, 0, len(got))
	var sum, sq float64
	for _, row := range want {
		for _, v := range row {
			flat = append(flat, float32(v))
			sum, sq = sum+v, sq+v*v
		}
	}
	n := float64(len(flat))
	t.Logf("logit std %.3g", math.Sqrt(sq/n-sum*sum/n/n))
	if d := kernelstest.RelDiff(got, flat); d > 1e-4 {
		t.Fatalf("CPU forward differs from the float64 reference by %.3g (relative)", d)
	}
}

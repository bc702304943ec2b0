package cpu

import (
	"fmt"
	"math"
)

// DeltaRuleRecurrent runs the gated delta rule token by token (spec §4.1) for
// one head: q and k [T, dk] already l2-normalized (q also scaled by
// dk^-0.5), v [T, dv], per-token log-decay g and β = sigmoid(b). S [dk, dv]
// is the state, updated in place; out [T, dv] receives o_t = S_tᵀ q_t.
//
// For each t: S ← e^{g_t} S; u = Sᵀk_t; δ = β_t (v_t − u); S ← S + k_t δᵀ;
// o_t = Sᵀ q_t.
func DeltaRuleRecurrent(q, k, v, g, beta []float32, T, dk, dv int, S []float32, out []float32) {
	checkDeltaArgs("DeltaRuleRecurrent", q, k, v, g, beta, T, dk, dv, S, out)
	delta := make([]float32, dv)
	for t := range T {
		qt, kt, vt := q[t*dk:(t+1)*dk], k[t*dk:(t+1)*dk], v[t*dv:(t+1)*dv]
		decay := float32(math.Exp(float64(g[t])))
		// Decay first, and accumulate u = Sᵀk in the same pass (into delta).
		clear(delta)
		for d := range dk {
			row := S[d*dv : (d+1)*dv]
			for j := range row {
				row[j] *= decay
			}
			axpy(kt[d], row, delta)
		}
		for j := range delta {
			delta[j] = beta[t] * (vt[j] - delta[j])
		}
		// Rank-1 update and read-out in one pass over S.
		o := out[t*dv : (t+1)*dv]
		clear(o)
		for d := range dk {
			row := S[d*dv : (d+1)*dv]
			axpy(kt[d], delta, row)
			axpy(qt[d], row, o)
		}
	}
}

// DeltaRuleChunked computes the same result as DeltaRuleRecurrent with the
// chunked WY form (spec §4.2), `chunk` tokens at a time, continuing from S.
// Per chunk of n tokens with local cumulative log-decay γ (inclusive):
//
//	A_ij = β_i (k_i·k_j) e^{γ_i−γ_j} for i > j (strictly lower)
//	W = (I+A)⁻¹ [β_i e^{γ_i} k_i],  U = (I+A)⁻¹ [β_i v_i]   (forward substitution)
//	Vn = U − W·S
//	O_i = e^{γ_i} q_i·S + Σ_{j≤i} (q_i·k_j) e^{γ_i−γ_j} Vn_j
//	S ← e^{γ_last} S + Σ_i e^{γ_last−γ_i} k_i Vn_iᵀ
//
// Only differences γ_i − γ_j with j ≤ i (and γ_i itself) are exponentiated,
// so every exponent is ≤ 0.
func DeltaRuleChunked(q, k, v, g, beta []float32, T, dk, dv, chunk int, S []float32, out []float32) {
	checkDeltaArgs("DeltaRuleChunked", q, k, v, g, beta, T, dk, dv, S, out)
	if chunk <= 0 {
		panic(fmt.Sprintf("cpu: DeltaRuleChunked: chunk %d", chunk))
	}
	C := min(chunk, T)
	gamma := make([]float32, C)
	decay := make([][]float32, C) // decay[i][j] = e^{γ_i−γ_j}, j ≤ i
	for i := range decay {
		decay[i] = make([]float32, i+1)
	}
	W := make([]float32, C*dk)
	U := make([]float32, C*dv) // becomes Vn
	for t0 := 0; t0 < T; t0 += chunk {
		n := min(chunk, T-t0)
		kc, qc := k[t0*dk:(t0+n)*dk], q[t0*dk:(t0+n)*dk]
		vc, oc := v[t0*dv:(t0+n)*dv], out[t0*dv:(t0+n)*dv]
		gc, bc := g[t0:t0+n], beta[t0:t0+n]
		kRow := func(i int) []float32 { return kc[i*dk : (i+1)*dk] }
		qRow := func(i int) []float32 { return qc[i*dk : (i+1)*dk] }

		var acc float32
		for i := range n {
			acc += gc[i]
			gamma[i] = acc
		}
		for i := range n {
			for j := 0; j <= i; j++ {
				decay[i][j] = float32(math.Exp(float64(gamma[i] - gamma[j])))
			}
		}

		// W and U by forward substitution on (I + A) X = R.
		for i := range n {
			wi, ui := W[i*dk:(i+1)*dk], U[i*dv:(i+1)*dv]
			bg := bc[i] * float32(math.Exp(float64(gamma[i])))
			for d, kv := range kRow(i) {
				wi[d] = bg * kv
			}
			for j, vv := range vc[i*dv : (i+1)*dv] {
				ui[j] = bc[i] * vv
			}
			for j := range i {
				aij := bc[i] * dot(kRow(i), kRow(j)) * decay[i][j]
				axpy(-aij, W[j*dk:(j+1)*dk], wi)
				axpy(-aij, U[j*dv:(j+1)*dv], ui)
			}
		}

		// Vn = U − W·S (in place in U), then the outputs.
		for i := range n {
			wi, ui := W[i*dk:(i+1)*dk], U[i*dv:(i+1)*dv]
			for d, wv := range wi {
				axpy(-wv, S[d*dv:(d+1)*dv], ui)
			}
		}
		for i := range n {
			o := oc[i*dv : (i+1)*dv]
			clear(o)
			for d, qv := range qRow(i) {
				axpy(qv, S[d*dv:(d+1)*dv], o)
			}
			eg := float32(math.Exp(float64(gamma[i])))
			for j := range o {
				o[j] *= eg
			}
			for j := 0; j <= i; j++ {
				axpy(dot(qRow(i), kRow(j))*decay[i][j], U[j*dv:(j+1)*dv], o)
			}
		}

		// State update.
		last := n - 1
		eLast := float32(math.Exp(float64(gamma[last])))
		for d := range dk {
			row := S[d*dv : (d+1)*dv]
			for j := range row {
				row[j] *= eLast
			}
		}
		for i := range n {
			ki := kRow(i)
			vn := U[i*dv : (i+1)*dv]
			w := decay[last][i]
			for d := range dk {
				axpy(w*ki[d], vn, S[d*dv:(d+1)*dv])
			}
		}
	}
}

func checkDeltaArgs(op string, q, k, v, g, beta []float32, T, dk, dv int, S, out []float32) {
	if len(q) < T*dk || len(k) < T*dk || len(v) < T*dv || len(g) < T || len(beta) < T ||
		len(S) < dk*dv || len(out) < T*dv {
		panic(fmt.Sprintf("cpu: %s: len(q)=%d len(k)=%d len(v)=%d len(g)=%d len(beta)=%d len(S)=%d len(out)=%d for T=%d dk=%d dv=%d",
			op, len(q), len(k), len(v), len(g), len(beta), len(S), len(out), T, dk, dv))
	}
}

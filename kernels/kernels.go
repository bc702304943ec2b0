// Package kernels defines the Backend: the small set of model-granularity
// operations the architectures' forward passes need (linear, embedding, the
// RMSNorm forms, partial RoPE, paged attention with or without a sigmoid
// output gate, causal conv1d with state, the gated delta rule, SwiGLU,
// collectives).
//
// A backend owns its tensors: model code builds a forward pass out of these
// calls and never touches tensor memory directly. kernels/cpu is the readable
// pure-Go oracle; kernels/cuda (build tag cuda) is the GPU backend.
//
// Activations are row-major matrices [rows, cols]: one row per token of the
// flat batch. Weights follow the Hugging Face layout [out, in] (y = x·Wᵀ).
package kernels

// Tensor is a backend-owned n-dimensional array.
type Tensor interface {
	// Shape returns the dimensions, outermost first. Callers must not modify it.
	Shape() []int
}

// Seq describes one sequence's rows in a flat batch.
type Seq struct {
	Slot   int     // recurrent and conv state slot on this rank
	Start  int     // index of the sequence's first row in the flat batch
	Len    int     // number of new tokens in this step
	Cached int     // tokens already processed (the position of the first new token)
	Pages  []int32 // KV pages holding positions [0, Cached+Len), in order
	// Pad marks a pad row's sequence (DecodePadder): it shares its slot
	// and page with the step's other pad rows, and its output is dropped.
	Pad bool
}

// End returns one past the sequence's last row in the flat batch.
func (s Seq) End() int { return s.Start + s.Len }

// Batch is the flat batch of one forward step: rows of several sequences of
// different lengths, prefill chunks and decode rows mixed.
type Batch struct {
	Positions []int32 // absolute position of every row
	Seqs      []Seq   // contiguous, non-overlapping row ranges in order
}

// Rows returns the number of rows in the batch.
func (b *Batch) Rows() int { return len(b.Positions) }

// AttnConfig is the per-rank shape of a gated full-attention layer.
type AttnConfig struct {
	Heads     int     // query heads on this rank
	KVHeads   int     // key/value heads on this rank
	HeadDim   int     // 256 for Qwen3.5
	RotaryDim int     // leading dims of each head that RoPE rotates
	Theta     float64 // RoPE base
}

// GDNConfig is the per-rank shape of a Gated DeltaNet layer.
type GDNConfig struct {
	KeyHeads   int // q/k heads on this rank
	ValueHeads int // v heads on this rank (a multiple of KeyHeads)
	KeyDim     int // dk
	ValueDim   int // dv
	ConvKernel int // K (4): the conv state keeps K-1 raw input rows
}

// ConvDim returns the number of conv channels: [q | k | v].
func (c GDNConfig) ConvDim() int { return 2*c.KeyHeads*c.KeyDim + c.ValueHeads*c.ValueDim }

// KVCache is a paged key/value cache for the full-attention layers of one rank.
type KVCache interface {
	PageSize() int
	Pages() int
}

// StatePool holds per-request GDN state for one rank: for every GDN layer and
// slot, the conv state [K-1, convDim] and the fp32 recurrent state
// [valueHeads, keyDim, valueDim].
type StatePool interface {
	Slots() int
	// Reset zeroes a slot's conv and recurrent state in every layer. A slot is
	// reset before it is given to a new request.
	Reset(slot int)
}

// SnapshotPool is implemented by state pools that keep copies of a slot's
// whole state (every GDN layer's conv and recurrent state) in places of
// their own, for the prefix cache (issue 17): Save at a block boundary of a
// prompt, Restore into the slot of a request that resumes there. Copies are
// ordered with the backend's ops.
type SnapshotPool interface {
	StatePool
	// AllocSnapshots replaces the pool's snapshot places with n new ones
	// (their contents undefined until saved) and returns the bytes of one.
	AllocSnapshots(n int) int64
	// Save copies slot's state into place.
	Save(slot, place int)
	// Restore copies place into slot's state.
	Restore(place, slot int)
}

// Backend is the op surface of one rank. Calls on one Backend happen from one
// goroutine (the rank's device executor). Ops allocate their outputs.
type Backend interface {
	Name() string

	// Upload copies host data (a weight or an input) into a backend tensor.
	Upload(data []float32, shape ...int) Tensor
	// Download copies a tensor to the host.
	Download(t Tensor) []float32

	// Embedding gathers rows of table for ids. table holds the vocab rows
	// [vocabStart, vocabStart+rows); ids outside that range give zero rows,
	// so a vocab-parallel embedding is completed by an AllReduce.
	Embedding(table Tensor, ids []int32, vocabStart int) Tensor
	// Linear returns x·wᵀ for x [T, in] and w [out, in].
	Linear(x, w Tensor) Tensor
	// RMSNorm is the zero-centered form: x / rms(x) · (1 + w), over the last
	// dim, applied per group of len(w) columns (so it also serves as the
	// per-head q/k norm).
	RMSNorm(x, w Tensor, eps float32) Tensor
	// AddRMSNorm returns sum = residual + delta and RMSNorm(sum, w).
	AddRMSNorm(residual, delta, w Tensor, eps float32) (sum, normed Tensor)
	// PlainRMSNorm is the plain form x / rms(x) · w, with the weight applied
	// as it is (values near 1: Llama's and Qwen3's RMSNorm), per group of
	// len(w) columns like RMSNorm.
	PlainRMSNorm(x, w Tensor, eps float32) Tensor
	// Add returns a + b.
	Add(a, b Tensor) Tensor
	// SwiGLU returns silu(gate) ⊙ up.
	SwiGLU(gate, up Tensor) Tensor

	// SplitQueryGate splits q_proj's per-head interleaved output
	// [T, heads·2·headDim] into the query [T, heads·headDim] and the gate.
	SplitQueryGate(qg Tensor, heads, headDim int) (q, gate Tensor)
	// RoPE rotates the first rotaryDim dims of every head in place
	// (rotate-half pairing (i, i+rotaryDim/2)).
	RoPE(x Tensor, positions []int32, headDim, rotaryDim int, theta float64)
	// Attention writes k and v [T, KVHeads·HeadDim] into the cache at the
	// batch positions, then computes causal GQA attention of q over every
	// cached position of its sequence, and multiplies the result by
	// sigmoid(gate). Output [T, Heads·HeadDim].
	Attention(q, k, v, gate Tensor, cache KVCache, layer int, b *Batch, cfg AttnConfig) Tensor
	// UngatedAttention is Attention without the output gate (dense
	// Qwen3, Llama): the attention result as it is.
	UngatedAttention(q, k, v Tensor, cache KVCache, layer int, b *Batch, cfg AttnConfig) Tensor

	// CausalConv1d applies the depthwise causal conv (weight [convDim, 1, K] or
	// [convDim, K]: convDim·K values, last dim K) and
	// SiLU to x [T, convDim], continuing each sequence from its conv state and
	// saving the last K-1 raw input rows back into it.
	CausalConv1d(x, w Tensor, states StatePool, layer int, b *Batch) Tensor
	// GatedDeltaRule runs the gated delta rule on the conv output mixed
	// [T, convDim] = [q | k | v] with raw projections beta [T, vHeads] (before
	// sigmoid) and a [T, vHeads], the per-head aLog and dtBias, continuing
	// each sequence from its recurrent state and storing the final state.
	// It l2-normalizes q and k and scales q by keyDim^-0.5. Output
	// [T, vHeads·valueDim].
	GatedDeltaRule(mixed, beta, a, aLog, dtBias Tensor, states StatePool, layer int, b *Batch, cfg GDNConfig) Tensor
	// GatedRMSNorm normalizes x per head of len(w) columns with the plain
	// weight w and multiplies by silu(z).
	GatedRMSNorm(x, z, w Tensor, eps float32) Tensor

	// SelectRows gathers rows of x (for example the last row of each sequence).
	SelectRows(x Tensor, rows []int) Tensor
	// AllReduce sums x element-wise across the ranks of the group, in place.
	AllReduce(x Tensor) error
	// AllGatherCols concatenates every rank's x along the last dim, in rank order.
	AllGatherCols(x Tensor) (Tensor, error)

	// NewKVCache allocates a paged KV cache for `layers` full-attention layers.
	NewKVCache(layers, pages, pageSize, kvHeads, headDim int) KVCache
	// NewStatePool allocates zeroed GDN state for `layers` GDN layers.
	NewStatePool(layers, slots int, cfg GDNConfig) StatePool
}

// ScratchResetter is implemented by backends that allocate op outputs from a
// per-step scratch arena (the CUDA backend). The rank's executor calls
// ResetScratch after every step, once the step's results are on the host.
type ScratchResetter interface {
	ResetScratch()
}

// LayerScoper is implemented by backends that can reuse a step's scratch
// from one decoder layer to the next. A model calls BeginLayer(i) before
// layer i's ops and EndLayers after the last layer. A tensor an op returns
// between BeginLayer(i) and BeginLayer(i+1) stays valid until
// BeginLayer(i+2) (so layer i+1 may read layer i's outputs); one returned
// before the first BeginLayer or after EndLayers, until the step ends.
type LayerScoper interface {
	BeginLayer(i int)
	EndLayers()
}

// BeginLayer tells be (a LayerScoper) that decoder layer i begins.
func BeginLayer(be Backend, i int) {
	if s, ok := be.(LayerScoper); ok {
		s.BeginLayer(i)
	}
}

// EndLayers tells be (a LayerScoper) that the decoder layers are done.
func EndLayers(be Backend) {
	if s, ok := be.(LayerScoper); ok {
		s.EndLayers()
	}
}

// ScratchArena is implemented by backends whose per-step scratch arena is
// device memory of their own (the CUDA backend). A rank measures the
// scratch of the largest step it may be sent with it and reserves that
// much before it sizes its request state, so the arena does not grow while
// it serves.
type ScratchArena interface {
	ScratchResetter
	// ScratchBytes returns the bytes the step in progress has taken from
	// the arena since the last ResetScratch, and the arena's capacity.
	ScratchBytes() (used, capacity int64)
	// ReserveScratch makes the arena one allocation of exactly bytes. It
	// is called between steps (no scratch in use).
	ReserveScratch(bytes int64) error
}

// StateFreer is implemented by backends whose KV caches and state pools
// hold memory that they give back before they close (the CUDA backend's
// device memory); elsewhere the garbage collector reclaims them. A freed
// cache or pool must not be used again.
type StateFreer interface {
	FreeKVCache(c KVCache)
	FreeStatePool(p StatePool)
}

// FreeKVCache gives back c's memory where be is a StateFreer.
func FreeKVCache(be Backend, c KVCache) {
	if f, ok := be.(StateFreer); ok && c != nil {
		f.FreeKVCache(c)
	}
}

// FreeStatePool gives back p's memory (its snapshot places included) where
// be is a StateFreer.
func FreeStatePool(be Backend, p StatePool) {
	if f, ok := be.(StateFreer); ok && p != nil {
		f.FreeStatePool(p)
	}
}

// StepInputs are the host inputs of one forward step: its tokens, its
// batch and the rows whose logits it returns. A backend that records a step
// (Stepper) may replay it from new inputs alone.
type StepInputs struct {
	Tokens []int32
	Batch  *Batch
	Rows   []int
}

// Stepper is implemented by backends that want to know where a forward
// step begins and ends (the CUDA backend uploads metadata shared by the
// step's ops once, and records decode steps as CUDA graphs). A non-empty
// graphKey promises that the step's launches (kernels, shapes, metadata
// sizes) are fully determined by the key, so a recording made for one step
// with that key replays any other. A step that fails before EndStep is
// discarded by the next BeginStep or ResetScratch.
type Stepper interface {
	// BeginStep starts a step over in.
	BeginStep(graphKey string, in StepInputs)
	// EndStep ends it; out is the step's result (the logits).
	EndStep(out Tensor)
	// ReplayStep runs the step recorded under graphKey on new inputs
	// without the model's ops, when the recording reads nothing but its
	// StepInputs, and returns the step's result; ok is false when there is
	// no such recording (the caller then runs the step as usual).
	ReplayStep(graphKey string, in StepInputs) (out Tensor, ok bool)
}

// WeightUploader is implemented by backends that store weights in their
// own format (the CUDA backend keeps matrices in bf16). The loader uploads
// every checkpoint tensor through UploadWeight when the backend has it;
// such weights are read only as the weight of Linear and the table of
// Embedding, or as norm, conv and gate parameters when they stay float32.
type WeightUploader interface {
	UploadWeight(data []float32, shape ...int) Tensor
}

// MemoryReporter is implemented by backends with a device memory of their
// own (the CUDA backend: cuMemGetInfo). A rank whose capacity budget is
// unset (0) takes the device's free memory once the weights are loaded and
// the step scratch is reserved (ScratchArena).
type MemoryReporter interface {
	MemInfo() (free, total int64, err error)
}

// FusedLinear is implemented by backends that read several weights against
// one input in a single pass (the CUDA backend's decode GEMV), so a layer's
// projections of the same activations cost one launch.
type FusedLinear interface {
	// Linears returns x·wᵢᵀ for every w, as Linear would.
	Linears(x Tensor, ws ...Tensor) []Tensor
	// SwiGLULinear returns SwiGLU(x·gateᵀ, x·upᵀ).
	SwiGLULinear(x, gate, up Tensor) Tensor
}

// Linears returns x·wᵢᵀ for every w: in one pass where be is a
// FusedLinear, else one Linear each.
func Linears(be Backend, x Tensor, ws ...Tensor) []Tensor {
	if f, ok := be.(FusedLinear); ok {
		return f.Linears(x, ws...)
	}
	out := make([]Tensor, len(ws))
	for i, w := range ws {
		out[i] = be.Linear(x, w)
	}
	return out
}

// SwiGLULinear returns SwiGLU(x·gateᵀ, x·upᵀ): in one pass where be is a
// FusedLinear, else two Linears and a SwiGLU.
func SwiGLULinear(be Backend, x, gate, up Tensor) Tensor {
	if f, ok := be.(FusedLinear); ok {
		return f.SwiGLULinear(x, gate, up)
	}
	return be.SwiGLU(be.Linear(x, gate), be.Linear(x, up))
}

// LinearFeeder is implemented by backends whose norms and SwiGLU can leave
// out the float32 elements of an output that only Linears read (the CUDA
// backend in prefill steps, whose Linears then read the bf16 copy the
// producing kernel writes). readers are the weights of those Linears: the
// output may be passed only as the x of Linear, Linears, SwiGLULinear or
// ConvLinears against them.
type LinearFeeder interface {
	// AddRMSNormFor is AddRMSNorm, normed read only by Linears of readers.
	AddRMSNormFor(readers []Tensor, residual, delta, w Tensor, eps float32) (sum, normed Tensor)
	// GatedRMSNormFor is GatedRMSNorm, read only by Linears of readers.
	GatedRMSNormFor(readers []Tensor, x, z, w Tensor, eps float32) Tensor
	// SwiGLULinearFor is SwiGLULinear, read only by Linears of readers.
	SwiGLULinearFor(readers []Tensor, x, gate, up Tensor) Tensor
}

// AddRMSNormFor is be.AddRMSNorm for a normed output that only Linears of
// readers read (LinearFeeder).
func AddRMSNormFor(be Backend, readers []Tensor, residual, delta, w Tensor, eps float32) (sum, normed Tensor) {
	if f, ok := be.(LinearFeeder); ok {
		return f.AddRMSNormFor(readers, residual, delta, w, eps)
	}
	return be.AddRMSNorm(residual, delta, w, eps)
}

// GatedRMSNormFor is be.GatedRMSNorm for an output that only Linears of
// readers read (LinearFeeder).
func GatedRMSNormFor(be Backend, readers []Tensor, x, z, w Tensor, eps float32) Tensor {
	if f, ok := be.(LinearFeeder); ok {
		return f.GatedRMSNormFor(readers, x, z, w, eps)
	}
	return be.GatedRMSNorm(x, z, w, eps)
}

// SwiGLULinearFor is SwiGLULinear for an output that only Linears of
// readers read (LinearFeeder).
func SwiGLULinearFor(be Backend, readers []Tensor, x, gate, up Tensor) Tensor {
	if f, ok := be.(LinearFeeder); ok {
		return f.SwiGLULinearFor(readers, x, gate, up)
	}
	return SwiGLULinear(be, x, gate, up)
}

// DecodePadder is implemented by backends that record decode steps for a
// few batch sizes (buckets) and run a smaller decode step as its bucket's:
// the extra rows are pad rows (Seq.Pad), one-token sequences at position 0
// in a state slot and a KV page that no request owns (PadSlotter,
// PadPager), their tokens 0 and their logits dropped (Head).
type DecodePadder interface {
	// DecodeBucket returns how many rows a decode step of rows rows runs
	// as: rows itself when such a step is not padded.
	DecodeBucket(rows int) int
	// DecodeBuckets lists, in ascending order, the buckets that steps of
	// at most maxRows rows run as (nil when decode steps are not padded):
	// what a rank records ahead of its first request (model.WarmDecode).
	DecodeBuckets(maxRows int) []int
	// Head returns the first rows rows of t without a copy.
	Head(t Tensor, rows int) Tensor
}

// PadSlotter is implemented by state pools that can keep a slot for pad
// rows beyond their Slots: PadSlot returns it, or -1 when this one keeps
// none.
type PadSlotter interface{ PadSlot() int }

// PadPager is implemented by KV caches that can keep a page for pad rows
// beyond their Pages: PadPage returns it, or -1 when this one keeps none.
type PadPager interface{ PadPage() int32 }

// GatedNorm is the gated RMSNorm that ends a Gated DeltaNet mixer: the
// gate Z, the plain weight W (one head of columns), Eps, and the weights of
// the Linears that alone read its output (as for GatedRMSNormFor).
type GatedNorm struct {
	Z, W    Tensor
	Eps     float32
	Readers []Tensor
}

// DeltaRuleNormer is implemented by backends that can run the gated delta
// rule and the gated RMSNorm of its output in one pass (the CUDA backend's
// batch-1 decode kernel).
type DeltaRuleNormer interface {
	// GatedDeltaRuleNorm is GatedRMSNormFor(n.Readers, GatedDeltaRule(…),
	// n.Z, n.W, n.Eps).
	GatedDeltaRuleNorm(n GatedNorm, mixed, beta, a, aLog, dtBias Tensor, states StatePool, layer int, b *Batch, cfg GDNConfig) Tensor
}

// GatedDeltaRuleNorm returns the gated RMSNorm n of be.GatedDeltaRule's
// output: in one pass where be is a DeltaRuleNormer.
func GatedDeltaRuleNorm(be Backend, n GatedNorm, mixed, beta, a, aLog, dtBias Tensor, states StatePool, layer int, b *Batch, cfg GDNConfig) Tensor {
	if f, ok := be.(DeltaRuleNormer); ok {
		return f.GatedDeltaRuleNorm(n, mixed, beta, a, aLog, dtBias, states, layer, b, cfg)
	}
	o := be.GatedDeltaRule(mixed, beta, a, aLog, dtBias, states, layer, b, cfg)
	return GatedRMSNormFor(be, n.Readers, o, n.Z, n.W, n.Eps)
}

// LinearNormer is implemented by backends that end a residual block in one
// pass for decode rows: the output projection, the residual add and the
// next RMSNorm (the CUDA backend's GEMV epilogue). For one rank only: under
// tensor parallelism the projection's partial sums are all-reduced before
// the add.
type LinearNormer interface {
	// LinearAddRMSNormFor returns sum = residual + x·wᵀ and
	// AddRMSNormFor(readers, ...)'s normed of it.
	LinearAddRMSNormFor(readers []Tensor, x, w, residual, norm Tensor, eps float32) (sum, normed Tensor)
}

// LinearAddRMSNormFor returns sum = residual + x·wᵀ and its RMSNorm with
// norm (read only by Linears of readers): in one pass where be is a
// LinearNormer, else Linear and AddRMSNormFor.
func LinearAddRMSNormFor(be Backend, readers []Tensor, x, w, residual, norm Tensor, eps float32) (sum, normed Tensor) {
	if f, ok := be.(LinearNormer); ok {
		return f.LinearAddRMSNormFor(readers, x, w, residual, norm, eps)
	}
	return AddRMSNormFor(be, readers, residual, be.Linear(x, w), norm, eps)
}

// ConvLinear is implemented by backends that run a GDN layer's causal conv
// inside its input projections (the CUDA backend's decode GEMV epilogue),
// so the conv costs no launch of its own.
type ConvLinear interface {
	// ConvLinears returns ConvLinears(be, ...)'s projections.
	ConvLinears(x, conv Tensor, states StatePool, layer int, b *Batch, ws ...Tensor) []Tensor
}

// ConvLinears returns x·wᵢᵀ for every w, the first of them passed through
// CausalConv1d(·, conv, states, layer, b): in one pass where be is a
// ConvLinear, else Linears and CausalConv1d.
func ConvLinears(be Backend, x, conv Tensor, states StatePool, layer int, b *Batch, ws ...Tensor) []Tensor {
	if f, ok := be.(ConvLinear); ok {
		return f.ConvLinears(x, conv, states, layer, b, ws...)
	}
	out := Linears(be, x, ws...)
	out[0] = be.CausalConv1d(out[0], conv, states, layer, b)
	return out
}

// DeviceSampler is implemented by backends that pick tokens where the
// logits are (the CUDA backend), so that only the ids (and the logprobs
// asked for) cross to the host.
type DeviceSampler interface {
	// Argmax returns the index of the largest logit of every row of logits
	// [rows, vocab]: the lowest index on ties, and never a NaN over a
	// number (as sample.Argmax).
	Argmax(logits Tensor) []int32
	// Sample draws (or scores) one token from every row of logits [rows,
	// vocab] as rows[r] describes it, and returns one result per row. The
	// host sampler (model/sample's PickWithHistory and Score) is its
	// specification: for the same description it picks the same tokens.
	Sample(logits Tensor, rows []SampleRow) []SampleResult
}

// MaxSampleTopN is the most alternatives a SampleRow may ask for.
const MaxSampleTopN = 20

// SampleRow describes the draw of one row of logits in plain terms, for a
// DeviceSampler. The draw follows model/sample's: the logits adjusted by
// Adjust; then, at a positive Temperature, the probabilities
// exp((logit − max)/Temperature), ordered most likely first (ties: lower
// id) and cut by top-k, then min-p (relative to the most likely), then
// top-p (the shortest prefix holding TopP of the mass); the token is the
// first whose running mass exceeds U times the mass kept. At Temperature 0
// or below it is the argmax of the adjusted logits (lowest id on ties).
// Reported logprobs are those of the raw logits.
type SampleRow struct {
	Temperature float64 // 0 or less: greedy
	TopK        int     // 0 or less, or the vocabulary or more: off
	TopP        float64 // 0 or 1: off
	MinP        float64 // 0: off
	// U is the draw's uniform in [0, 1), drawn on the host from the
	// request's seed and step (model/sample's Params.Uniform), so a device
	// need not know the generator.
	U float64
	// Adjust are the changes made to the logits before the draw, ids
	// ascending, distinct and within the vocabulary.
	Adjust []LogitAdjust
	// Score asks for the logprob of Target (a prompt token) and the TopN
	// most likely tokens instead of a draw.
	Score  bool
	Target int32
	// Logprobs asks for the drawn token's logprob; TopN (at most
	// MaxSampleTopN) for that many of the most likely tokens, which
	// implies it.
	Logprobs bool
	TopN     int
}

// AdjustOps are the operations a LogitAdjust makes, as bits, carried out
// in the order Repeat, Penalize, Bias, Ban, each rounded to float32.
type AdjustOps uint8

const (
	AdjustRepeat   AdjustOps = 1 << iota // divide a positive logit by Scale, multiply any other by it
	AdjustPenalize                       // subtract Subtract
	AdjustBias                           // add Bias
	AdjustBan                            // set to -Inf
)

// LogitAdjust is the change made to one token's logit before a draw
// (model/sample's Adjustment: penalties, logit bias, stop tokens banned
// before min_tokens).
type LogitAdjust struct {
	ID       int32
	Ops      AdjustOps
	Scale    float32
	Subtract float32
	Bias     float32
}

// TokenLogprob is a token and its logprob under the raw logits.
type TokenLogprob struct {
	ID      int32
	Logprob float64
}

// SampleResult is the outcome of one SampleRow: the drawn (or scored)
// token, with its logprob when the row asked for one (else 0), and the
// TopN most likely tokens, most likely first (ties: lower id).
type SampleResult struct {
	Token TokenLogprob
	Top   []TokenLogprob
}

// QKPreparer is implemented by backends that prepare a gated attention
// layer's query, gate and key in one pass (the CUDA backend).
type QKPreparer interface {
	// PrepareQK returns what PrepareQKOps returns.
	PrepareQK(qg, k, qNorm, kNorm Tensor, positions []int32, cfg AttnConfig, eps float32) (q, gate, kOut Tensor)
}

// PrepareQK splits q_proj's interleaved output qg into the query and the
// gate, RMS-normalizes the query and k per head (zero-centered weights
// qNorm and kNorm) and rotates both by RoPE at positions: in one pass where
// be is a QKPreparer, else with PrepareQKOps.
func PrepareQK(be Backend, qg, k, qNorm, kNorm Tensor, positions []int32, cfg AttnConfig, eps float32) (q, gate, kOut Tensor) {
	if p, ok := be.(QKPreparer); ok {
		return p.PrepareQK(qg, k, qNorm, kNorm, positions, cfg, eps)
	}
	return PrepareQKOps(be, qg, k, qNorm, kNorm, positions, cfg, eps)
}

// PrepareQKOps is PrepareQK as five ops: SplitQueryGate, two RMSNorms and
// two RoPEs.
func PrepareQKOps(be Backend, qg, k, qNorm, kNorm Tensor, positions []int32, cfg AttnConfig, eps float32) (q, gate, kOut Tensor) {
	q, gate = be.SplitQueryGate(qg, cfg.Heads, cfg.HeadDim)
	q = be.RMSNorm(q, qNorm, eps)
	kOut = be.RMSNorm(k, kNorm, eps)
	be.RoPE(q, positions, cfg.HeadDim, cfg.RotaryDim, cfg.Theta)
	be.RoPE(kOut, positions, cfg.HeadDim, cfg.RotaryDim, cfg.Theta)
	return q, gate, kOut
}

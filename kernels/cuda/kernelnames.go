package cuda

// kernelNames are the entry points looked up in the module (every
// extern "C" kernel of kernels/*.cu: TestKernelNamesListEveryEntry).
var kernelNames = []string{
	"add_f32", "swiglu_f32", "swiglu4_f32", "swiglu4_bf16in", "swiglu8_bf16in", "embedding_f32", "embedding_bf16", "f32_to_bf16", "gemv_bf16",
	"gemv_mma_nt1", "gemv_mma_nt2", "gemv_mma_nt4", "gemv_mma_swiglu_nt1", "gemv_mma_swiglu_nt2", "gemv_mma_swiglu_nt4",
	"gemv_mma_u2_nt1", "gemv_mma_o6_nt1", "gemv_mma_o7_nt1", "gemv_mma_o8_nt1",
	"gemv_mma_swiglu_o6_nt1", "gemv_mma_swiglu_o7_nt1", "gemv_mma_swiglu_o8_nt1", "gemv_mma_conv_nt1", "gemv_mma_conv_o6_nt1",
	"gemv_mma_addnorm_nt1", "gemv_mma_addnorm_o6_nt1", "gemv_bulk_nt1", "gemv_mmab_nt2", "gemv_mmab_nt4", "gemv_mmab_nt8",
	"select_rows_f32", "split_query_gate_f32", "rope_f32",
	"rmsnorm_f32", "plain_rmsnorm_f32", "add_rmsnorm_f32", "gated_rmsnorm_f32", "add_rmsnorm_rows_f32", "rmsnorm_rows_f32", "gated_rmsnorm_rows_f32",
	"gemm_nt_f32",
	"kv_write_f32", "attention_f32", "attn_prep_f32", "attn_prep_rows_f32",
	"attention_decode_g1", "attention_decode_g2", "attention_decode_g4", "attention_decode_combine",
	"attention_prefill_hd64", "attention_prefill_hd128", "attention_prefill_hd256",
	"attention_prefill_split_hd64", "attention_prefill_split_hd128", "attention_prefill_split_hd256", "attention_prefill_combine",
	"kv_write_bf16", "attention_kvbf16", "attention_decode_kvbf16_g1", "attention_decode_kvbf16_g2", "attention_decode_kvbf16_g4",
	"attention_prefill_kvbf16_hd64", "attention_prefill_kvbf16_hd128", "attention_prefill_kvbf16_hd256",
	"attention_prefill_split_kvbf16_hd64", "attention_prefill_split_kvbf16_hd128", "attention_prefill_split_kvbf16_hd256",
	"attention_prefill_kvbf16_hd256_ldm", "attention_prefill_split_kvbf16_hd256_ldm",
	"attention_prefill_kvbf16_hd256_wg", "attention_prefill_split_kvbf16_hd256_wg",
	"attention_prefill_kvbf16_hd256_wgp", "attention_prefill_split_kvbf16_hd256_wgp",
	"attention_prefill_kvbf16_hd256_wgt", "attention_prefill_split_kvbf16_hd256_wgt",
	"attention_prefill_kvbf16_hd256_wgc", "attention_prefill_split_kvbf16_hd256_wgc",
	"argmax_rows", "argmax_ids", "sample_prep", "sample_exp", "sample_rows",
	"conv1d_f32", "conv1d_tile8_f32", "conv1d_tile1_f32", "conv1d_pipe_f32", "gdn_qk_norm_f32", "gdn_qk_norm_rows_f32", "gdn_gates_f32",
	"gdn_recurrent_f32", "gdn_recurrent_cols_f32", "gdn_recurrent_cols_wide_f32", "gdn_recurrent_cols_pipe_f32",
	"gdn_decode_cols_f32", "gdn_decode_cols_wide_f32", "gdn_decode_norm_cols_f32",
	"gdn_chunk_prep_f32", "gdn_chunk_prep_inv_f32", "gdn_chunk_prep_mma_f32", "gdn_chunk_prep_pipe_f32", "gdn_chunk_scan_f32", "gdn_chunk_scan_mma_f32",
	"gdn_chunk_state_mma_f32", "gdn_chunk_out_mma_f32", "gdn_chunk_out_tf32_f32", "gdn_chunk_prep_pipe_tf32_f32",
	// the bf16-state twins (COHORT_CUDA_GDN_STATE=bf16, gdn_state.go)
	"gdn_recurrent_f32_sbf16", "gdn_recurrent_cols_f32_sbf16", "gdn_recurrent_cols_wide_f32_sbf16", "gdn_recurrent_cols_pipe_f32_sbf16",
	"gdn_decode_cols_f32_sbf16", "gdn_decode_cols_wide_f32_sbf16", "gdn_decode_norm_cols_f32_sbf16", "gdn_chunk_scan_f32_sbf16", "gdn_chunk_scan_mma_f32_sbf16",
	"gdn_chunk_state_mma_f32_sbf16", "gdn_chunk_state_tf32_f32", "gdn_chunk_state_tf32_f32_sbf16",
	// the wide state passes (COHORT_CUDA_GDN_STATE_COLS, gdn_chunk.go)
	"gdn_chunk_state_w64_mma_f32", "gdn_chunk_state_w64_mma_f32_sbf16", "gdn_chunk_state_w64_tf32_f32", "gdn_chunk_state_w64_tf32_f32_sbf16",
	"gdn_chunk_state_w32_mma_f32", "gdn_chunk_state_w32_mma_f32_sbf16", "gdn_chunk_state_w32_tf32_f32", "gdn_chunk_state_w32_tf32_f32_sbf16",
}

// collectiveKernels are the device-side kernels of 60_allreduce.cu, looked
// up when collectives start.
var collectiveKernels = []string{"allreduce_oneshot_f32", "gather_cols_f32"}

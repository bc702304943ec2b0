// Package safetensors reads and writes the Hugging Face safetensors format.
//
// A safetensors file is an 8-byte little-endian header length N, N bytes of
// JSON describing the tensors, and then a byte buffer holding their data:
//
//	{"__metadata__": {"k": "v"},
//	 "name": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 12]}}
//
// data_offsets are relative to the start of the byte buffer.
//
// The reader validates everything before handing out a tensor: header size,
// JSON syntax, duplicate keys, field types, dtypes, shapes, offsets, sizes and
// overlapping data ranges. Every error starts with "safetensors: ". Open maps
// files read-only with mmap, so tensor data is never copied; it also
// understands sharded checkpoints described by model.safetensors.index.json.
//
// Write and WriteFile produce files with tensors sorted by name, data laid out
// contiguously and the header padded with spaces so data starts 8-aligned.
package safetensors

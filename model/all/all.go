// Package all registers every architecture Cohort serves. Import it for its
// side effect wherever a checkpoint is opened by name (the CLI, tests that
// load any model); adding an architecture adds one line here.
package all

import (
	_ "cohort/model/qwen3"  // Qwen3ForCausalLM
	_ "cohort/model/qwen35" // Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration
)

package model

import (
	"fmt"
	"strconv"

	"cohort/kernels"
)

// DecodeStepKey names a decode step (one new token per sequence, every row
// an output, in order) for backends that record steps (kernels.Stepper):
// all such steps of one model on one state run the same launches, so a
// recording made for one replays any other. A recording holds the weights'
// and the state's device addresses, so the key names the model and the
// state by identities that are never reused (NewID), not by address. Any
// other step, or a zero identity, gets "" (not recordable).
func DecodeStepKey(family string, b *kernels.Batch, outputRows []int, modelID, stateID uint64) string {
	if modelID == 0 || stateID == 0 || b.Rows() == 0 || len(b.Seqs) != b.Rows() || len(outputRows) != b.Rows() {
		return ""
	}
	for i, s := range b.Seqs {
		if s.Len != 1 || s.Start != i || outputRows[i] != i {
			return ""
		}
	}
	return family + "/decode/" + strconv.Itoa(b.Rows()) + "/model-" + strconv.FormatUint(modelID, 10) +
		"/state-" + strconv.FormatUint(stateID, 10)
}

// RunStep runs one forward step of the architecture family (run, over the
// inputs in) on be, after checking that every row has a token. A backend
// that records steps (kernels.Stepper) replays its recording of the step's
// DecodeStepKey when it has one, and otherwise sees run bracketed by
// BeginStep and EndStep so that it may record it. A decode step on a
// backend that pads them (kernels.DecodePadder) runs as its bucket's, with
// pad rows in pad's place (nil: never padded), and returns the logits of
// its own rows. Other backends just run it.
func RunStep(be kernels.Backend, family string, modelID, stateID uint64, in kernels.StepInputs, pad *Pad,
	run func(in kernels.StepInputs) (kernels.Tensor, error)) (kernels.Tensor, error) {
	if len(in.Tokens) != in.Batch.Rows() {
		return nil, fmt.Errorf("%s: %d tokens for a batch of %d rows", family, len(in.Tokens), in.Batch.Rows())
	}
	key := DecodeStepKey(family, in.Batch, in.Rows, modelID, stateID)
	stepper, ok := be.(kernels.Stepper)
	if !ok {
		return run(in)
	}
	rows := in.Batch.Rows()
	padder, _ := be.(kernels.DecodePadder)
	if key != "" && pad != nil && padder != nil {
		if n := padder.DecodeBucket(rows); n > rows {
			in = PadDecode(in, n, *pad)
			key = DecodeStepKey(family, in.Batch, in.Rows, modelID, stateID)
		}
	}
	logits, err := recordedStep(stepper, key, in, run)
	if err != nil || logits == nil || in.Batch.Rows() == rows {
		return logits, err
	}
	return padder.Head(logits, rows), nil
}

// recordedStep replays the recording of key when the backend has one, and
// otherwise runs the step between BeginStep and EndStep.
func recordedStep(stepper kernels.Stepper, key string, in kernels.StepInputs, run func(in kernels.StepInputs) (kernels.Tensor, error)) (kernels.Tensor, error) {
	if key != "" {
		if logits, ok := stepper.ReplayStep(key, in); ok {
			return logits, nil
		}
	}
	stepper.BeginStep(key, in)
	logits, err := run(in)
	if err != nil {
		return nil, err
	}
	stepper.EndStep(logits)
	return logits, nil
}

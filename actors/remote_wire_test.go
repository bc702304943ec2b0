package actors

import (
	"reflect"
	"testing"

	"cohort/model/sample"
)

// TestParamsWireRoundTrip: every sampling parameter survives the protobuf
// form remote ranks receive.
func TestParamsWireRoundTrip(t *testing.T) {
	for _, p := range []sample.Params{
		{},
		{Temperature: 0.7, TopK: 40, TopP: 0.9, MinP: 0.05, Seed: 1 << 40, PresencePenalty: 0.5,
			FrequencyPenalty: -0.25, RepetitionPenalty: 1.1,
			LogitBias: []sample.TokenBias{{ID: 3, Bias: -100}, {ID: 70000, Bias: 2.5}}, MinTokens: 4, StopIDs: []int32{1, 9}},
	} {
		if got := paramsFromPB(paramsToPB(p)); !reflect.DeepEqual(got, p) {
			t.Errorf("round trip of %+v gave %+v", p, got)
		}
	}
}

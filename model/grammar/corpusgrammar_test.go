package grammar

import (
	"errors"
	"slices"
	"testing"

	"cohort/model/grammar/grammartest"
)

// TestCorpusUnsupportedRefused: a schema using an unsupported keyword is
// refused with an error naming that keyword.
func TestCorpusUnsupportedRefused(t *testing.T) {
	for _, us := range grammartest.UnsupportedCorpus(t) {
		_, err := JSONSchema(us.Schema, nil)
		var ue *UnsupportedError
		if !errors.As(err, &ue) || ue.Keyword != us.Keyword && !slices.Contains(ue.Others, us.Keyword) {
			t.Errorf("%s: err = %v, want the keyword %q refused", us.Name, err, us.Keyword)
		}
	}
}

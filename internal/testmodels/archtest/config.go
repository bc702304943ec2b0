package archtest

import (
	"strings"
	"testing"

	"cohort/model"
)

// ConfigErrors checks that model.ParseConfig refuses each edit of the valid
// config.json base. An edit is {name, from, to, want}: the first from is
// replaced by to, and the error must mention want.
func ConfigErrors(t *testing.T, base string, edits [][4]string) {
	for _, e := range edits {
		name, from, to, want := e[0], e[1], e[2], e[3]
		t.Run(name, func(t *testing.T) {
			src := strings.Replace(base, from, to, 1)
			if src == base {
				t.Fatalf("test edit %q did not apply", from)
			}
			_, err := model.ParseConfig([]byte(src))
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("err = %v, want it to mention %q", err, want)
			}
		})
	}
}

//go:build cgo

package dynload

import (
	"errors"
	"strings"
	"testing"
	"unsafe"
)

func needs(sym string) func(unsafe.Pointer) string {
	return func(h unsafe.Pointer) string {
		if Sym(h, sym) == nil {
			return sym
		}
		return ""
	}
}

func TestOpenFirstLoadable(t *testing.T) {
	t.Setenv("DYNLOAD_TEST_PATH", "")
	s := Spec{What: "libm", Env: "DYNLOAD_TEST_PATH", Paths: []string{"libcohort-absent.so.1", "libm.so.6"}}
	lib, err := Open(s, needs("cos"))
	if err != nil {
		t.Fatal(err)
	}
	if lib.Path != "libm.so.6" || lib.Handle == nil {
		t.Fatalf("loaded %q (handle %p), want libm.so.6", lib.Path, lib.Handle)
	}
}

// TestOpenListsEveryPath checks the error names the environment variable
// and every candidate tried, in order, each with its reason.
func TestOpenListsEveryPath(t *testing.T) {
	t.Setenv("DYNLOAD_TEST_PATH", "/nonexistent/libx.so")
	s := Spec{What: "X (libx)", Env: "DYNLOAD_TEST_PATH", Paths: []string{"libcohort-absent.so.1", "libm.so.6"}}
	_, err := Open(s, needs("cohort_no_such_symbol"))
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v, want *Error", err)
	}
	if got := len(e.Tried); got != 3 {
		t.Fatalf("tried %d paths, want 3: %v", got, err)
	}
	msg := err.Error()
	for _, want := range []string{"dynload: cannot load X (libx)", "set DYNLOAD_TEST_PATH",
		"/nonexistent/libx.so (", "libcohort-absent.so.1 (", "libm.so.6 (lacks symbol cohort_no_such_symbol)"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	if i, j := strings.Index(msg, "/nonexistent"), strings.Index(msg, "libm.so.6"); i > j {
		t.Errorf("the environment variable's path is not tried first: %q", msg)
	}
}

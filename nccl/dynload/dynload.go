//go:build cgo

package dynload

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>

static void *dl_open(const char *path) { return dlopen(path, RTLD_NOW | RTLD_LOCAL); }
static const char *dl_error(void) { const char *e = dlerror(); return e ? e : "unknown dlopen error"; }
static void *dl_sym(void *h, const char *name) { return dlsym(h, name); }
*/
import "C"

import (
	"fmt"
	"os"
	"strings"
	"unsafe"
)

// Spec says what a library is and where to look for it.
type Spec struct {
	What  string   // for messages, e.g. "NCCL (libnccl.so.2)"
	Env   string   // variable holding a path tried before Paths, when set
	Paths []string // absolute paths, or sonames for the dynamic linker's search
}

// Candidates returns the paths Open tries, in order: $Env (when set), then
// Paths.
func (s Spec) Candidates() []string {
	var out []string
	if v := os.Getenv(s.Env); v != "" {
		out = append(out, v)
	}
	return append(out, s.Paths...)
}

// Library is an opened shared library. It stays open for the life of the
// process.
type Library struct {
	Path   string         // the candidate that loaded
	Handle unsafe.Pointer // dlopen's handle, for dlsym
}

// Attempt is one candidate Open tried and why it was not used.
type Attempt struct {
	Path   string
	Reason string
}

// Error is a library that could not be loaded from any candidate.
type Error struct {
	Spec  Spec
	Tried []Attempt
}

func (e *Error) Error() string {
	tried := make([]string, len(e.Tried))
	for i, a := range e.Tried {
		tried[i] = fmt.Sprintf("%s (%s)", a.Path, a.Reason)
	}
	return fmt.Sprintf("dynload: cannot load %s; set %s to its path; tried: %s",
		e.Spec.What, e.Spec.Env, strings.Join(tried, "; "))
}

// Open dlopens the first of s.Candidates() that loads and for which bind
// succeeds. bind resolves the caller's symbols from the handle (dlsym) and
// returns the name of the first missing one, or "". A candidate that loads
// but lacks a symbol is closed and the search goes on.
func Open(s Spec, bind func(handle unsafe.Pointer) (missing string)) (*Library, error) {
	e := &Error{Spec: s}
	for _, p := range s.Candidates() {
		cp := C.CString(p)
		h := C.dl_open(cp)
		C.free(unsafe.Pointer(cp))
		if h == nil {
			e.Tried = append(e.Tried, Attempt{Path: p, Reason: C.GoString(C.dl_error())})
			continue
		}
		if missing := bind(h); missing != "" {
			C.dlclose(h)
			e.Tried = append(e.Tried, Attempt{Path: p, Reason: "lacks symbol " + missing})
			continue
		}
		return &Library{Path: p, Handle: h}, nil
	}
	return nil, e
}

// Sym returns the address of symbol name in the library of handle, or nil.
func Sym(handle unsafe.Pointer, name string) unsafe.Pointer {
	cn := C.CString(name)
	defer C.free(unsafe.Pointer(cn))
	return C.dl_sym(handle, cn)
}

// Package pieces feeds an incremental parser its input in pieces, the way a
// stream delivers it, for the parsers' tests (httpapi/reasoning,
// httpapi/toolcall). Dev-only: the layering test keeps it out of
// production packages.
package pieces

// Parser is an incremental parser of text into events of type E.
type Parser[E any] interface {
	Feed(text string) []E
	Finish() []E
}

// Feed feeds text to p in pieces of size bytes (all at once when size is 0
// or less), then finishes it, handing every event to each in order.
func Feed[E any](p Parser[E], text string, size int, each func(E)) {
	emit := func(evs []E) {
		for _, ev := range evs {
			each(ev)
		}
	}
	if size <= 0 {
		emit(p.Feed(text))
	} else {
		for i := 0; i < len(text); i += size {
			emit(p.Feed(text[i:min(i+size, len(text))]))
		}
	}
	emit(p.Finish())
}

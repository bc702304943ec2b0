package tokenizer

// StreamDecoder turns a stream of ids into text deltas. Deltas never split a
// UTF-8 sequence, and the concatenation of all Add results followed by Flush
// equals Decode of all the ids. It is not safe for concurrent use.
type StreamDecoder struct {
	t       *Tokenizer
	pending []byte // bytes of an incomplete (so far valid) UTF-8 sequence
	started bool   // a token was emitted (for the non byte-level decoder)
}

// NewStreamDecoder returns a decoder for an id stream.
func (t *Tokenizer) NewStreamDecoder() *StreamDecoder {
	return &StreamDecoder{t: t}
}

// Add consumes one id and returns the newly completed text (possibly "").
// Unknown ids are ignored, as in Decode.
func (d *StreamDecoder) Add(id int32) string {
	tok, ok := d.t.Token(id)
	if !ok {
		return ""
	}
	if !d.t.decodeBytes {
		if d.started {
			tok = " " + tok
		}
		d.started = true
		return tok
	}
	buf := byteLevelDecodeToken(d.pending, tok)
	var out []byte
	i := 0
	for i < len(buf) {
		n, st := seqLen(buf[i:])
		if st == seqIncomplete {
			// The outcome depends on bytes still to come.
			break
		}
		if st == seqValid {
			out = append(out, buf[i:i+n]...)
		} else {
			out = append(out, "\uFFFD"...)
		}
		i += n
	}
	d.pending = append(d.pending[:0:0], buf[i:]...)
	return string(out)
}

// Flush returns the text of any buffered incomplete sequence (as U+FFFD) and
// resets the decoder.
func (d *StreamDecoder) Flush() string {
	out := string(appendLossy(nil, d.pending))
	d.pending = nil
	d.started = false
	return out
}

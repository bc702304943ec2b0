package safetensors

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
)

// maxHeaderLen bounds the JSON header; real headers are well under 10 MiB.
const maxHeaderLen = 100 << 20

const metadataKey = "__metadata__"

// entry is a parsed tensor plus its data range, kept for the overlap check.
type entry struct {
	t          Tensor
	begin, end int
}

// ParseHeader validates a whole safetensors file held in buf and returns its
// tensors, sorted by name, with Data slicing into buf, and its __metadata__.
func ParseHeader(buf []byte) (tensors []Tensor, meta map[string]string, err error) {
	tensors, meta, err = parseFile(buf)
	if err != nil {
		return nil, nil, fmt.Errorf("safetensors: %w", err)
	}
	return tensors, meta, nil
}

// parseFile is ParseHeader without the "safetensors: " error prefix.
func parseFile(buf []byte) ([]Tensor, map[string]string, error) {
	if len(buf) < 8 {
		return nil, nil, fmt.Errorf("file is %d bytes, too short for the 8-byte header length", len(buf))
	}
	n := binary.LittleEndian.Uint64(buf)
	if n > maxHeaderLen {
		return nil, nil, fmt.Errorf("header length %d exceeds the %d-byte limit", n, maxHeaderLen)
	}
	if n > uint64(len(buf)-8) {
		return nil, nil, fmt.Errorf("header length %d exceeds the %d bytes after the length prefix", n, len(buf)-8)
	}
	header, data := buf[8:8+n], buf[8+n:]
	if !utf8.Valid(header) {
		return nil, nil, errors.New("header is not valid UTF-8")
	}
	entries, meta, err := parseEntries(header, data)
	if err != nil {
		return nil, nil, err
	}
	if err := checkOverlap(entries); err != nil {
		return nil, nil, err
	}
	tensors := make([]Tensor, len(entries))
	for i, e := range entries {
		tensors[i] = e.t
	}
	slices.SortFunc(tensors, func(a, b Tensor) int { return cmp.Compare(a.Name, b.Name) })
	return tensors, meta, nil
}

// parseEntries walks the top-level header object.
func parseEntries(header, data []byte) ([]entry, map[string]string, error) {
	var entries []entry
	meta := map[string]string{}
	err := forEachMember(header, func(key string, val []byte) error {
		if key == metadataKey {
			m, err := parseMetadata(val)
			meta = m
			return err
		}
		e, err := parseEntry(key, val, data)
		if err != nil {
			return fmt.Errorf("tensor %q: %w", key, err)
		}
		entries = append(entries, e)
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("header: %w", err)
	}
	return entries, meta, nil
}

// forEachMember decodes raw as one JSON object and calls fn for every member
// in order. It uses the token stream so repeated keys are reported rather
// than silently merged, and rejects anything after the closing brace.
func forEachMember(raw []byte, fn func(key string, val []byte) error) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("invalid JSON: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return errors.New("expected a JSON object")
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("invalid JSON: %w", err)
		}
		key, _ := tok.(string) // object keys are always strings
		if seen[key] {
			return fmt.Errorf("duplicate key %q", key)
		}
		seen[key] = true
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return fmt.Errorf("invalid JSON: %w", err)
		}
		if err := fn(key, val); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return fmt.Errorf("invalid JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("invalid JSON: trailing data after the object")
	}
	return nil
}

// parseMetadata decodes __metadata__, which must map strings to strings.
func parseMetadata(raw []byte) (map[string]string, error) {
	meta := map[string]string{}
	err := forEachMember(raw, func(key string, val []byte) error {
		s, err := parseString(val)
		if err != nil {
			return fmt.Errorf("key %q: %w", key, err)
		}
		meta[key] = s
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", metadataKey, err)
	}
	return meta, nil
}

// parseEntry decodes and validates one tensor description against data.
func parseEntry(name string, raw, data []byte) (entry, error) {
	var dtype, shape, offsets []byte
	err := forEachMember(raw, func(key string, val []byte) error {
		switch key {
		case "dtype":
			dtype = val
		case "shape":
			shape = val
		case "data_offsets":
			offsets = val
		default:
			return fmt.Errorf("unknown field %q", key)
		}
		return nil
	})
	if err != nil {
		return entry{}, err
	}
	for _, f := range []struct {
		name string
		val  []byte
	}{{"dtype", dtype}, {"shape", shape}, {"data_offsets", offsets}} {
		if f.val == nil {
			return entry{}, fmt.Errorf("missing field %q", f.name)
		}
	}
	t := Tensor{Name: name}
	ds, err := parseString(dtype)
	if err != nil {
		return entry{}, fmt.Errorf("dtype: %w", err)
	}
	t.DType = DType(ds)
	if t.Shape, err = parseInts(shape); err != nil {
		return entry{}, fmt.Errorf("shape: %w", err)
	}
	size, err := byteSize(t.DType, t.Shape)
	if err != nil {
		return entry{}, err
	}
	begin, end, err := parseOffsets(offsets, len(data))
	if err != nil {
		return entry{}, fmt.Errorf("data_offsets: %w", err)
	}
	if end-begin != size {
		return entry{}, fmt.Errorf("data_offsets [%d, %d] span %d bytes, %s%v needs %d",
			begin, end, end-begin, t.DType, t.Shape, size)
	}
	t.Data = data[begin:end:end]
	return entry{t: t, begin: begin, end: end}, nil
}

// parseOffsets validates a [begin, end] pair against a data buffer length.
func parseOffsets(raw []byte, dataLen int) (begin, end int, err error) {
	offs, err := parseInts(raw)
	if err != nil {
		return 0, 0, err
	}
	if len(offs) != 2 {
		return 0, 0, fmt.Errorf("want 2 elements, got %d", len(offs))
	}
	begin, end = offs[0], offs[1]
	switch {
	case begin < 0 || end < 0:
		return 0, 0, fmt.Errorf("negative offset in [%d, %d]", begin, end)
	case begin > end:
		return 0, 0, fmt.Errorf("begin %d > end %d", begin, end)
	case end > dataLen:
		return 0, 0, fmt.Errorf("end %d is beyond the %d-byte data buffer", end, dataLen)
	}
	return begin, end, nil
}

// parseString decodes a JSON string (null and other types are rejected).
func parseString(raw []byte) (string, error) {
	var s string
	if len(raw) == 0 || raw[0] != '"' {
		return "", fmt.Errorf("expected a string, got %.40s", raw)
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", err
	}
	return s, nil
}

// parseInts decodes a JSON array of integers that fit in int.
func parseInts(raw []byte) ([]int, error) {
	var elems []json.RawMessage
	if len(raw) == 0 || raw[0] != '[' {
		return nil, fmt.Errorf("expected an array of integers, got %.40s", raw)
	}
	if err := json.Unmarshal(raw, &elems); err != nil {
		return nil, err
	}
	out := make([]int, len(elems))
	for i, e := range elems {
		v, err := strconv.ParseInt(string(bytes.TrimSpace(e)), 10, strconv.IntSize)
		if err != nil {
			return nil, fmt.Errorf("element %d (%.40s) is not an integer in range", i, e)
		}
		out[i] = int(v)
	}
	return out, nil
}

// checkOverlap reports two non-empty data ranges that share bytes.
func checkOverlap(entries []entry) error {
	sorted := slices.Clone(entries)
	slices.SortFunc(sorted, func(a, b entry) int {
		return cmp.Or(cmp.Compare(a.begin, b.begin), cmp.Compare(a.end, b.end),
			cmp.Compare(a.t.Name, b.t.Name))
	})
	prevEnd, prevName := math.MinInt, ""
	for _, e := range sorted {
		if e.begin == e.end {
			continue // empty ranges share no bytes
		}
		if e.begin < prevEnd {
			return fmt.Errorf("tensors %q and %q have overlapping data ranges", prevName, e.t.Name)
		}
		prevEnd, prevName = e.end, e.t.Name
	}
	return nil
}

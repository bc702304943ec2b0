package safetensors

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"unicode/utf8"
)

// Write encodes tensors (sorted by name, data contiguous in that order) and
// meta as a safetensors stream. The header is padded with spaces so the data
// buffer starts at an 8-byte aligned file offset. An empty meta is omitted.
func Write(w io.Writer, tensors []Tensor, meta map[string]string) error {
	sorted := slices.Clone(tensors)
	slices.SortFunc(sorted, func(a, b Tensor) int { return cmp.Compare(a.Name, b.Name) })
	header, err := buildHeader(sorted, meta)
	if err != nil {
		return err
	}
	var prefix [8]byte
	binary.LittleEndian.PutUint64(prefix[:], uint64(len(header)))
	if _, err := w.Write(prefix[:]); err != nil {
		return fmt.Errorf("safetensors: write: %w", err)
	}
	if _, err := w.Write(header); err != nil {
		return fmt.Errorf("safetensors: write: %w", err)
	}
	for _, t := range sorted {
		if _, err := w.Write(t.Data); err != nil {
			return fmt.Errorf("safetensors: write tensor %q: %w", t.Name, err)
		}
	}
	return nil
}

// buildHeader validates sorted tensors and renders the padded JSON header.
func buildHeader(sorted []Tensor, meta map[string]string) ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	if len(meta) > 0 {
		for k, v := range meta {
			if !utf8.ValidString(k) || !utf8.ValidString(v) {
				return nil, fmt.Errorf("safetensors: metadata key %q: not valid UTF-8", k)
			}
		}
		m, _ := json.Marshal(meta) // map[string]string cannot fail
		fmt.Fprintf(&b, "%q:%s", metadataKey, m)
	}
	offset := 0
	for i, t := range sorted {
		if err := checkWritable(sorted, i); err != nil {
			return nil, err
		}
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		name, _ := json.Marshal(t.Name)
		fmt.Fprintf(&b, `%s:{"dtype":%q,"shape":[`, name, string(t.DType))
		for j, d := range t.Shape {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(d))
		}
		fmt.Fprintf(&b, `],"data_offsets":[%d,%d]}`, offset, offset+len(t.Data))
		offset += len(t.Data)
	}
	b.WriteByte('}')
	for b.Len()%8 != 0 {
		b.WriteByte(' ')
	}
	return b.Bytes(), nil
}

// checkWritable validates sorted[i] and that its name is not a repeat.
func checkWritable(sorted []Tensor, i int) error {
	t := sorted[i]
	switch {
	case t.Name == metadataKey:
		return fmt.Errorf("safetensors: tensor name %q is reserved", t.Name)
	case !utf8.ValidString(t.Name):
		return fmt.Errorf("safetensors: tensor %q: name is not valid UTF-8", t.Name)
	case i > 0 && sorted[i-1].Name == t.Name:
		return fmt.Errorf("safetensors: duplicate tensor name %q", t.Name)
	}
	if err := t.check(); err != nil {
		return fmt.Errorf("safetensors: tensor %q: %w", t.Name, err)
	}
	return nil
}

// WriteFile writes a safetensors file atomically: it writes a temporary file
// in the same directory and renames it over path.
func WriteFile(path string, tensors []Tensor, meta map[string]string) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	bw := bufio.NewWriterSize(tmp, 1<<20)
	if err := Write(bw, tensors, meta); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("safetensors: %s: %w", path, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("safetensors: %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("safetensors: %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	return nil
}
